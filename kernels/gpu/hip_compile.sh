#!/bin/sh
# The compiler launcher of the HIP sources when the C++ compiler is not Clang (kernels/CMakeLists.txt):
# called as `hip_compile.sh CLANG CXX ARGS...`, it runs `CLANG ARGS...` instead of `CXX ARGS...`.
clang=$1
shift 2
exec "$clang" "$@"
