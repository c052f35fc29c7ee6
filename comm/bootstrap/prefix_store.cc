#include "chorus/store.h"

namespace chorus {

void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& key : keys) prefixed.push_back(prefix_ + key);
  base_->wait(prefixed, timeout);
}

}  // namespace chorus
