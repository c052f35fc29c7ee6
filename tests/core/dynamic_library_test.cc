// DynamicLibrary on libraries every Linux process has (the C library) and ones no machine has.
#include <gtest/gtest.h>

#include <cstddef>
#include <utility>

#include "chorus/dynamic_library.h"

namespace chorus {
namespace {

constexpr const char* kMissing = "libchorus-no-such-library.so.7";

TEST(DynamicLibrary, OpensTheFirstSonameThatLoads) {
  const DynamicLibrary lib({kMissing, "libc.so.6"});
  ASSERT_TRUE(lib) << lib.error();
  EXPECT_EQ(lib.soname(), "libc.so.6");
  EXPECT_TRUE(lib.error().empty());
  auto strlen_fn = lib.symbol<size_t (*)(const char*)>("strlen");
  ASSERT_NE(strlen_fn, nullptr);
  EXPECT_EQ(strlen_fn("chorus"), 6u);
  EXPECT_EQ(lib.symbol<void (*)()>("chorus_no_such_symbol"), nullptr);
}

TEST(DynamicLibrary, NoneLoadsSaysWhyForEachSoname) {
  const DynamicLibrary lib({kMissing, "libchorus-nor-this.so"});
  EXPECT_FALSE(lib.loaded());
  EXPECT_TRUE(lib.soname().empty());
  EXPECT_NE(lib.error().find(kMissing), std::string::npos) << lib.error();
  EXPECT_NE(lib.error().find("libchorus-nor-this.so"), std::string::npos) << lib.error();
  EXPECT_EQ(lib.symbol<void (*)()>("strlen"), nullptr);
}

TEST(DynamicLibrary, FindLoadedLoadsNothingNew) {
  EXPECT_TRUE(DynamicLibrary::find_loaded({"libc.so.6"}).loaded());
  EXPECT_FALSE(DynamicLibrary::find_loaded({kMissing}).loaded());
}

TEST(DynamicLibrary, MovesTheHandle) {
  DynamicLibrary a({"libc.so.6"});
  DynamicLibrary b(std::move(a));
  EXPECT_FALSE(a.loaded());  // NOLINT(bugprone-use-after-move): moved-from is empty
  ASSERT_TRUE(b.loaded());
  DynamicLibrary c;
  c = std::move(b);
  EXPECT_EQ(c.soname(), "libc.so.6");
  EXPECT_NE(c.symbol<size_t (*)(const char*)>("strlen"), nullptr);
}

}  // namespace
}  // namespace chorus
