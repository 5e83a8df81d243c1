// Passkeys (WebAuthn) in the console: adding one on the Passkeys page, and approving with one
// where a rule asks for it (`step_up = { webauthn = true }`). The server issues every
// challenge and checks every answer; this only carries them between it and the authenticator.
(function () {
  "use strict";

  function toBytes(b64url) {
    var b64 = b64url.replace(/-/g, "+").replace(/_/g, "/");
    while (b64.length % 4) b64 += "=";
    var raw = atob(b64);
    var out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out.buffer;
  }

  function toB64url(buffer) {
    var bytes = new Uint8Array(buffer);
    var raw = "";
    for (var i = 0; i < bytes.length; i++) raw += String.fromCharCode(bytes[i]);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function ids(list) {
    return (list || []).map(function (c) { return Object.assign({}, c, { id: toBytes(c.id) }); });
  }

  // POST a form's fields to `url`; the JSON answer, or an Error with the server's message
  function ask(url, form) {
    return fetch(url, { method: "POST", body: new FormData(form), credentials: "same-origin" })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (body) {
          if (!r.ok) throw new Error((body.error && body.error.message) || "gate refused (" + r.status + ")");
          return body;
        });
      });
  }

  function say(form, message) {
    var p = form.querySelector(".passkey-error");
    if (!p) {
      p = document.createElement("p");
      p.className = "field-error passkey-error";
      p.setAttribute("role", "alert");
      form.appendChild(p);
    }
    p.textContent = message;
    p.hidden = !message;
  }

  function why(err) {
    if (err && err.name === "NotAllowedError") return "The passkey was not used (cancelled, or it timed out). Try again.";
    return (err && err.message) || String(err);
  }

  function busy(form, on) {
    form.querySelectorAll("button").forEach(function (b) { b.disabled = on; });
  }

  function set(form, name, value) {
    var input = form.querySelector("input[name=" + name + "]");
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      form.appendChild(input);
    }
    input.value = value;
  }

  function register(form) {
    if (!window.PublicKeyCredential) { say(form, "This browser cannot use passkeys."); return; }
    busy(form, true);
    say(form, "");
    ask("/passkeys/options", form).then(function (answer) {
      var options = answer.publicKey;
      options.challenge = toBytes(options.challenge);
      options.user = Object.assign({}, options.user, { id: toBytes(options.user.id) });
      options.excludeCredentials = ids(options.excludeCredentials);
      return navigator.credentials.create({ publicKey: options }).then(function (cred) {
        var response = cred.response;
        set(form, "nonce", answer.nonce);
        set(form, "credential", JSON.stringify({
          id: cred.id,
          rawId: toB64url(cred.rawId),
          type: cred.type,
          response: {
            clientDataJSON: toB64url(response.clientDataJSON),
            attestationObject: toB64url(response.attestationObject),
            transports: response.getTransports ? response.getTransports() : []
          },
          clientExtensionResults: cred.getClientExtensionResults(),
          authenticatorAttachment: cred.authenticatorAttachment || undefined
        }));
        form.submit();
      });
    }).catch(function (err) { busy(form, false); say(form, why(err)); });
  }

  function approve(form) {
    if (!window.PublicKeyCredential) { say(form, "This browser cannot use passkeys, which this rule needs to approve."); return; }
    busy(form, true);
    say(form, "");
    ask(form.dataset.passkey, form).then(function (answer) {
      var options = answer.publicKey;
      options.challenge = toBytes(options.challenge);
      options.allowCredentials = ids(options.allowCredentials);
      return navigator.credentials.get({ publicKey: options }).then(function (cred) {
        var response = cred.response;
        set(form, "passkey_nonce", answer.nonce);
        set(form, "passkey_assertion", JSON.stringify({
          id: cred.id,
          rawId: toB64url(cred.rawId),
          type: cred.type,
          response: {
            clientDataJSON: toB64url(response.clientDataJSON),
            authenticatorData: toB64url(response.authenticatorData),
            signature: toB64url(response.signature),
            userHandle: response.userHandle ? toB64url(response.userHandle) : undefined
          },
          clientExtensionResults: cred.getClientExtensionResults(),
          authenticatorAttachment: cred.authenticatorAttachment || undefined
        }));
        form.submit();
      });
    }).catch(function (err) { busy(form, false); say(form, why(err)); });
  }

  // On the document, so the forms' own checks (app.js: the edit form's review step) run
  // first and may stop the post; form.submit() afterwards fires no second submit event.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (e.defaultPrevented || !(form instanceof HTMLFormElement)) return;
    if (form.id === "passkey-add") { e.preventDefault(); register(form); }
    else if (form.dataset.passkey) { e.preventDefault(); approve(form); }
  });
})();
