#!/bin/sh
# Builds DIR (default .venv313): DIR/bin/python is Python 3.13, the interpreter the Lambda
# functions run, with the runtime dependencies (layers/requirements.txt) and the test
# dependencies (tests/requirements-py313.txt). Used by `make test`.
#
# The interpreter, first found: $PYTHON313; python3.13 on PATH; a pyenv 3.13. With none,
# Debian's python3.13 packages are unpacked into DIR/root without installing anything
# system-wide (the recipe of the project's field notes): they need a newer glibc than the
# host's, so DIR/bin/python starts them through the unpacked loader and packages go to
# DIR/site with `pip install --target` (a venv's symlink would bypass the loader).
set -eu
DIR=${1:-.venv313}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REQS="-r $ROOT/layers/requirements.txt -r $ROOT/tests/requirements-py313.txt"

is313() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; }

found=""
for candidate in "${PYTHON313:-}" "$(command -v python3.13 || true)" $(ls -d "$HOME"/.pyenv/versions/3.13.*/bin/python3.13 2>/dev/null | sort -r); do
  if is313 "$candidate"; then found=$candidate; break; fi
done

rm -rf "$DIR"
if [ -n "$found" ]; then
  echo "python313: $found"
  "$found" -m venv "$DIR"
  "$DIR/bin/python" -m pip install --quiet --upgrade pip
  # shellcheck disable=SC2086
  "$DIR/bin/python" -m pip install --quiet $REQS
  exit 0
fi

echo "python313: no Python 3.13 found; unpacking Debian's python3.13 into $DIR/root"
SOURCES=/etc/apt/sources.list.d/debian.sources
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null || [ ! -f "$SOURCES" ]; then
  echo "python313: needs apt-get, dpkg and $SOURCES; or set PYTHON313=/path/to/python3.13" >&2
  echo "python313: (make test SKIP_PY313=1 runs the suite on the default interpreter only)" >&2
  exit 1
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sed 's/^Suites: bookworm bookworm-updates$/Suites: trixie/' "$SOURCES" \
  | awk 'BEGIN{RS="";ORS="\n\n"} /Suites: trixie/' > "$WORK/trixie.sources"
APT="-o Dir::Etc::sourcelist=$WORK/trixie.sources -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$WORK/lists -o Dir::Cache=$WORK/cache"
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial"
# shellcheck disable=SC2086
apt-get -qq $APT update
# shellcheck disable=SC2086
(cd "$WORK" && apt-get -qq $APT download python3.13 python3.13-minimal libpython3.13-minimal \
  libpython3.13-stdlib libc6 libssl3t64 libffi8 zlib1g libexpat1 libsqlite3-0 liblzma5 libbz2-1.0 \
  libuuid1 libncursesw6 libtinfo6 libreadline8t64 libdb5.3t64 libzstd1 libcrypt1 libgcc-s1)
mkdir -p "$DIR/root" "$DIR/site" "$DIR/bin"
for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$DIR/root"; done
PREFIX=$(cd "$DIR" && pwd)
cat > "$DIR/bin/python" <<WRAPPER
#!/bin/sh
PYTHONPATH="$PREFIX/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$PREFIX/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
  --library-path "$PREFIX/root/usr/lib/x86_64-linux-gnu:$PREFIX/root/lib/x86_64-linux-gnu" \\
  "$PREFIX/root/usr/bin/python3.13" "\$@"
WRAPPER
chmod +x "$DIR/bin/python"
is313 "$DIR/bin/python" || { echo "python313: the unpacked interpreter does not start" >&2; exit 1; }
# Debian's 3.13 has no ensurepip: pip runs from its own wheel.
python3 -m pip download --quiet --no-deps -d "$WORK/pip" pip
# shellcheck disable=SC2086
"$DIR/bin/python" "$(ls "$WORK"/pip/pip-*.whl)/pip" install --quiet --target "$DIR/site" $REQS
