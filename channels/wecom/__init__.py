"""WeCom (企业微信): template cards from a self-built app, verified and decrypted callbacks.

One module per role:

* `settings`: `[channels.wecom]` (`WeComSettings`, the channel's settings model);
* `crypto`: WeCom's signature and AES scheme (WXBizMsgCrypt), on bytes;
* `verify`: signature, timestamp window and decryption on the raw bytes, then safe XML;
* `card`: the template cards rendered from a request's view (pure);
* `clicks`: a card click or a typed command read into gate's `Click`;
* `answers`: what the clicker is told, privately, and the text-message safety rules;
* `codes`: the ResponseCodes that let gate update a card;
* `api`: the server API over httpx (access token cache, send, update);
* `channel`: `WeComChannel`, the glue the `gate.channels` entry point names.
"""

from channels.wecom.channel import WeComChannel
from channels.wecom.settings import WeComSettings

__all__ = ["WeComChannel", "WeComSettings"]
