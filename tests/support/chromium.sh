#!/bin/sh
# Debian's Chromium, with every --disable-features switch it is given merged into one.
#
# Chromium honours only the last of several --disable-features switches; Playwright passes one
# of its own (features whose absence it relies on) and tests/support/browser.py adds another,
# so unmerged, one of the two lists would be dropped. Started by Playwright as the browser's
# executable (`launched`); exec keeps the process Playwright watches and stops.
features=
for arg; do
  shift
  case $arg in
    --disable-features=*) features="$features${features:+,}${arg#--disable-features=}" ;;
    *) set -- "$@" "$arg" ;;
  esac
done
exec /usr/bin/chromium "$@" ${features:+"--disable-features=$features"}
