#!/usr/bin/env bash
# Makes .ray/ (ignored by git) for `SCALING_PHASE=ray bash scripts/gpu/run_scaling.sh` on the lent H200 (Python
# 3.12, no network): Ray's cp312 wheel unpacked without the libraries grading never imports (rllib, tune, train,
# serve, data, llm, workflow, jars), its ELF files stripped, packed as .ray/ray-pkg.tar.xz to fit one
# call's carry, and the wheels Ray imports that the image lacks. Run from the repository root on a machine that
# reaches PyPI.
set -euo pipefail
RAY=${RAY_VERSION:-2.60.0}
WORK=$(mktemp -d /tmp/ray-carry.XXXX)
trap 'rm -rf "$WORK"' EXIT
download() {  # download DEST PACKAGE...: cp312 manylinux wheels, nothing they depend on
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$@"
}
download "$WORK" "ray==$RAY"
mkdir -p "$WORK/site" .ray
python3 -m zipfile -e "$WORK"/ray-"$RAY"-*.whl "$WORK/site"
for part in rllib tune train serve data llm workflow jars; do rm -rf "$WORK/site/ray/$part"; done
find "$WORK/site" -name '__pycache__' -prune -exec rm -rf {} +
find "$WORK/site" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'file -b "$1" | grep -q ELF && strip --strip-unneeded "$1"' _ {} \; 2>/dev/null || true
# zipfile keeps no modes: Ray's own servers (gcs_server, raylet) are ELF executables it starts, so mark them so
find "$WORK/site" -type f ! -name '*.so*' -exec sh -c 'file -b "$1" | grep -q "ELF.*executable" && chmod +x "$1"' _ {} \;
tar -C "$WORK/site" -cJf .ray/ray-pkg.tar.xz .
rm -f .ray/*.whl
download .ray click msgpack protobuf jsonschema jsonschema-specifications referencing rpds-py attrs
du -sh .ray .ray/*
