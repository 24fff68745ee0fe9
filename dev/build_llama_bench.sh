#!/usr/bin/env bash
# llama.cpp's own benchmark, llama-bench, built from the llama.cpp that requirements-extras.txt's pinned
# llama-cpp-python vendors: the C++ tool llama.cpp's maintainers compare engines with (issue 56).
#   bash dev/build_llama_bench.sh         # -> ~/.cache/tablefree/llama-bench/bin/llama-bench (15-20 min on 2 cores)
#   bash dev/build_llama_bench.sh DIR     # build it under DIR instead (never inside the checkout: its sources are
#                                         # Python files the layout test would read as ours)
# The source distribution is hash-pinned: pip checks its sha256 before anything is unpacked or built.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
out=$(realpath -m "${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tablefree/llama-bench}")  # where kernel.py keeps built C
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
mkdir -p "$out"
echo "llama-cpp-python==$version --hash=sha256:$sha256" > "$out/pinned.txt"
$py -m pip download --quiet --no-deps --no-binary llama-cpp-python --require-hashes -r "$out/pinned.txt" -d "$out"
rm -rf "$out/src" && mkdir "$out/src"
tar -xzf "$out/llama_cpp_python-$version.tar.gz" -C "$out/src" --strip-components=1
# the vendored llama.cpp, built for this CPU (GGML_NATIVE) with no network code and only the benchmark
cmake -S "$out/src/vendor/llama.cpp" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
      -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$out/cmake.log"
cmake --build "$out/cmake" --target llama-bench -j "$(nproc)" >> "$out/cmake.log"
mkdir -p "$out/bin" && cp "$out/cmake/bin/llama-bench" "$out/bin/"
echo "$out/bin/llama-bench"
