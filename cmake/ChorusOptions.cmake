# Build options. The accelerator and network options take ON, OFF or AUTO (on when the toolchain
# or library is found).
set(CHORUS_WITH_CUDA AUTO CACHE STRING
  "Build the GPU runtime and kernels with CUDA (ON/OFF/AUTO; AUTO: on when nvcc is found and this machine has an NVIDIA driver, so a toolkit without a GPU does not slow the default build)")
set(CHORUS_WITH_HIP OFF CACHE STRING
  "Build the GPU runtime and kernels with HIP (ON/OFF/AUTO; AUTO: on when HIP is found and /dev/kfd exists)")
set(CHORUS_CUDA_ARCHITECTURES "80;90" CACHE STRING
  "CUDA architectures for the GPU kernels when CMAKE_CUDA_ARCHITECTURES is not given (80: A100, 90: H100/H200)")
set(CHORUS_HIP_ARCHITECTURES "gfx90a" CACHE STRING
  "AMD GPU targets for the GPU kernels (gfx90a: MI200; add gfx942 for MI300 with ROCm >= 5.7)")
set(CHORUS_WITH_UCX AUTO CACHE STRING "Build the UCX transport for multi-host jobs (ON/OFF/AUTO)")
option(CHORUS_BUILD_TESTS "Build the GoogleTest suites" ON)
option(CHORUS_BUILD_BENCH "Build chorus-bench and the kernel benchmarks" ON)
set(CHORUS_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined or thread")

set_property(CACHE CHORUS_WITH_CUDA PROPERTY STRINGS ON OFF AUTO)
set_property(CACHE CHORUS_WITH_HIP PROPERTY STRINGS ON OFF AUTO)
set_property(CACHE CHORUS_WITH_UCX PROPERTY STRINGS ON OFF AUTO)

# Resolve AUTO to a boolean CHORUS_HAVE_<X>.
include(CheckLanguage)

# CUDA: AUTO also asks for a driver, because compiling the kernels for two architectures costs
# minutes on a small machine and is wasted where nothing can run them. CI builds the GPU code with
# CHORUS_WITH_CUDA=ON in its own build directory (tools/chorus gpu).
set(CHORUS_HAVE_CUDA OFF)
if(CHORUS_WITH_CUDA STREQUAL "ON" OR CHORUS_WITH_CUDA STREQUAL "AUTO")
  check_language(CUDA)
  set(_chorus_nvidia_driver OFF)
  if(EXISTS /proc/driver/nvidia/version OR EXISTS /dev/nvidiactl)
    set(_chorus_nvidia_driver ON)
  endif()
  if(CMAKE_CUDA_COMPILER AND (CHORUS_WITH_CUDA STREQUAL "ON" OR _chorus_nvidia_driver))
    set(CHORUS_HAVE_CUDA ON)
  elseif(CHORUS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CHORUS_WITH_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER, e.g. /usr/local/cuda/bin/nvcc)")
  elseif(CMAKE_CUDA_COMPILER)
    message(STATUS "chorus: nvcc found but no NVIDIA driver: GPU code not built (CHORUS_WITH_CUDA=ON builds it)")
  endif()
endif()
set(CHORUS_HAVE_HIP OFF)
if(CHORUS_WITH_HIP STREQUAL "ON" OR (CHORUS_WITH_HIP STREQUAL "AUTO" AND EXISTS /dev/kfd))
  find_package(hip CONFIG QUIET)
  # The .cu sources compile as HIP with Clang: the C++ compiler if it is Clang, else ROCm's
  # amdclang++ or a versioned clang++ (Debian's HIP 5.2 pairs with clang++-15); the rest of chorus
  # keeps the C++ compiler it has.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(CHORUS_HIP_CLANG ${CMAKE_CXX_COMPILER} CACHE FILEPATH "Clang that compiles the HIP sources")
  else()
    find_program(CHORUS_HIP_CLANG NAMES amdclang++ clang++ PATHS ${ROCM_PATH}/llvm/bin NO_DEFAULT_PATH
                 DOC "Clang that compiles the HIP sources")
    find_program(CHORUS_HIP_CLANG NAMES clang++-15 clang++-16 clang++-17 clang++
                 DOC "Clang that compiles the HIP sources")
  endif()
  if(hip_FOUND AND CHORUS_HIP_CLANG)
    set(CHORUS_HAVE_HIP ON)
  elseif(CHORUS_WITH_HIP STREQUAL "ON")
    message(FATAL_ERROR "CHORUS_WITH_HIP=ON but the hip CMake package (found: ${hip_FOUND}) or a Clang for it (CHORUS_HIP_CLANG: ${CHORUS_HIP_CLANG}) is missing: apt-get install hipcc libamdhip64-dev, or set CMAKE_PREFIX_PATH=/opt/rocm")
  endif()
endif()
if(CHORUS_HAVE_CUDA AND CHORUS_HAVE_HIP)
  message(FATAL_ERROR "CHORUS_WITH_CUDA and CHORUS_WITH_HIP are both on: one build targets one GPU runtime")
endif()
if(CHORUS_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${CHORUS_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 knows nvcc's dialect flags only up to C++17; nvcc >= 12 accepts C++20.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
if(CHORUS_HAVE_HIP)
  # Debian's packages put the device libraries outside the place clang looks for them.
  find_path(CHORUS_HIP_DEVICE_LIB_PATH NAMES ockl.bc
    PATHS ${ROCM_PATH}/amdgcn/bitcode ${ROCM_PATH}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/amdgcn/bitcode
          ${ROCM_PATH}/lib/amdgcn/bitcode
    NO_DEFAULT_PATH)
endif()
set(CHORUS_HAVE_UCX OFF)
if(CHORUS_WITH_UCX STREQUAL "ON" OR CHORUS_WITH_UCX STREQUAL "AUTO")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(UCX QUIET IMPORTED_TARGET ucx)
  endif()
  if(UCX_FOUND)
    set(CHORUS_HAVE_UCX ON)
  elseif(CHORUS_WITH_UCX STREQUAL "ON")
    message(FATAL_ERROR "CHORUS_WITH_UCX=ON but UCX was not found (apt-get install libucx-dev)")
  endif()
endif()
message(STATUS "chorus: CUDA=${CHORUS_HAVE_CUDA} HIP=${CHORUS_HAVE_HIP} UCX=${CHORUS_HAVE_UCX}")
