#!/bin/sh
# uv's installer, as obsspec's verifier kit serves it: uv is already in the kit; this puts it
# where the real installer would (UV_INSTALL_DIR, else XDG_BIN_HOME, else ~/.local/bin),
# with the env file the installer writes beside it.
set -e
bin=${UV_INSTALL_DIR:-${XDG_BIN_HOME:-$HOME/.local/bin}}
sh /obsspec-kit/place-uv.sh "$bin"
echo "installing to $bin (obsspec's verifier kit)"
echo "everything's installed!"
