// The CUDA backend's cuBLASLt is opened at run time: here the library and every function used
// must resolve (this needs no device); a binary that never runs a GPU GEMM needs no library.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/cublaslt.h"

namespace chorus::tensor {
namespace {

TEST(TensorGpuCublasLt, TheLibraryOpensAndHasEveryFunction) {
  const std::string error = cuda::CublasLt::load_error();
  if (!error.empty() && error.find("not found") != std::string::npos)
    GTEST_SKIP() << "no cuBLASLt on this machine: " << error;
  EXPECT_EQ(error, "");
}

}  // namespace
}  // namespace chorus::tensor
