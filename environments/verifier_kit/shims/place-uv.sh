#!/bin/sh
# Puts the kit's uv and uvx in directory $1, with an `env` file that adds $1 to PATH (what
# uv's installer writes, so that `source $HOME/.local/bin/env` works).
set -e
bin=$1
mkdir -p "$bin"
ln -sf /obsspec-kit/bin/uv "$bin/uv"
ln -sf /obsspec-kit/bin/uvx "$bin/uvx"
cat > "$bin/env" <<ENV
#!/bin/sh
# Adds $bin to PATH once (obsspec's verifier kit, in place of uv's installer).
case ":\${PATH}:" in
    *:"$bin":*) ;;
    *) export PATH="$bin:\$PATH" ;;
esac
ENV
