// Sharded checkpoints: what each rank writes, the atomic replacement of the directory, and
// loading at any mesh by reading the overlapping entries (checkpoint.h).
#include "chorus/parallel/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "checkpoint/manifest.h"
#include "checkpoint/region.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/serialize.h"
#include "common/fault_injection.h"
#include "common/gather_strings.h"

namespace chorus::parallel {

using tensor::Tensor;
namespace fs = std::filesystem;

namespace {

const char* const kKinds[] = {"exp_avg", "exp_avg_sq", "master"};

// One piece of one logical tensor this rank saves: its bytes are the local tensor's elements
// that `region` covers, in run order.
struct Item {
  std::string name, kind;
  Tensor local;  // contiguous
  Region region;
  tensor::Shape full_shape;
};

std::string file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

std::string mesh_text(const CheckpointState& s) {
  const MeshShape& m = s.mesh->shape();
  const int ep = s.expert_replicas ? s.mesh->dp().size() / s.expert_replicas->size() : 1;
  return "dp=" + std::to_string(m.dp) + " tp=" + std::to_string(m.tp) +
         " pp=" + std::to_string(m.pp) + " zero=" + std::to_string(s.zero ? s.zero->stage() : 0) +
         (ep > 1 ? " ep=" + std::to_string(ep) : "");
}

// The model's shape as the manifest records it. A mixture of experts adds "experts" and
// "moe_every" (their parameters' names depend on them); a dense model records neither, so its
// manifests stay as they were.
std::map<std::string, int64_t> model_fields(const tensor::nn::GPTConfig& c) {
  std::map<std::string, int64_t> f{{"vocab", c.vocab},
                                   {"context", c.context},
                                   {"layers", c.layers},
                                   {"heads", c.heads},
                                   {"width", c.width}};
  if (c.experts > 0) {
    f["experts"] = c.experts;
    f["moe_every"] = c.moe_every;
  }
  return f;
}

const Tensor* find(const tensor::nn::NamedTensors& named, const std::string& name) {
  for (const auto& [n, t] : named)
    if (n == name) return &t;
  return nullptr;
}

// Whether this rank writes a parameter every tp rank holds whole (only tp rank 0 does).
bool writes(tensor::nn::Module& model, const std::string& name, const CheckpointState& s) {
  return s.mesh->tp().rank() == 0 || is_tensor_parallel_slice(model, name);
}

// The parameters of `opt` and their AdamW state, which the ranks of `replicas` hold alike: this
// rank's part of each (the replicas split every parameter into equal parts).
void replica_items(const CheckpointState& s, tensor::optim::AdamW& opt, Communicator& replicas,
                   std::vector<Item>& items) {
  tensor::nn::GPT& model = *s.model;
  const int n_rep = replicas.size(), d = replicas.rank();
  const tensor::nn::NamedTensors state = opt.state_dict();
  for (const auto& [name, p] : opt.params()) {
    if (!writes(model, name, s)) continue;
    tensor::Shape full;
    const Region whole = param_region(model, name, p, &full);
    const int64_t n = p.numel(), a = n * d / n_rep, b = n * (d + 1) / n_rep;
    const Region r = sub_region(whole, a, b);
    auto part = [&](const Tensor& t) {
      return t.detach().contiguous().view({-1}).narrow(0, a, b - a).contiguous();
    };
    items.push_back({name, "param", part(p), r, full});
    for (const char* kind : kKinds)
      if (const Tensor* t = find(state, name + "." + kind))
        items.push_back({name, kind, part(*t), r, full});
  }
}

// The shard of `zero` this rank holds: the pieces' values and their AdamW state. With hybrid
// sharding the first replica of the shards saves them.
void zero_items(const CheckpointState& s, ZeroOptimizer& zero, std::vector<Item>& items) {
  if (zero.replica() != 0) return;
  tensor::nn::GPT& model = *s.model;
  const tensor::nn::NamedTensors state = zero.shard_optimizer().state_dict();
  const tensor::nn::NamedTensors named = model.named_parameters();
  for (const auto& info : zero.shard_layout()) {
    if (info.owned_begin == info.owned_end || !writes(model, info.name, s)) continue;
    tensor::Shape full;
    const Region whole = param_region(model, info.name, *find(named, info.name), &full);
    const Region r = sub_region(whole, info.owned_begin, info.owned_end);
    const Tensor* piece = find(zero.shard_optimizer().params(), info.name);
    CHORUS_CHECK(piece != nullptr, "checkpoint: no ZeRO piece of ", info.name);
    items.push_back({info.name, "param", piece->detach().contiguous(), r, full});
    for (const char* kind : kKinds)
      if (const Tensor* t = find(state, info.name + "." + kind))
        items.push_back({info.name, kind, t->detach().contiguous(), r, full});
  }
}

std::vector<Item> items_to_save(const CheckpointState& s) {
  std::vector<Item> items;
  // The experts that step apart: their replicas split them (DDP) or each saves its shard (ZeRO).
  if (s.expert_optimizer != nullptr)
    replica_items(s, *s.expert_optimizer, *s.expert_replicas, items);
  if (s.expert_zero != nullptr) zero_items(s, *s.expert_zero, items);
  if (s.zero != nullptr) {
    zero_items(s, *s.zero, items);
    return items;
  }
  CHORUS_ARG_CHECK(s.optimizer != nullptr, "save_checkpoint: no optimizer (AdamW or ZeRO)");
  // The data-parallel replicas hold the same values: each writes its dp-th part.
  replica_items(s, *s.optimizer, s.mesh->dp(), items);
  return items;
}

// Writes the items' bytes to `path`; returns the file's description (entries with offsets).
FileInfo write_items(const std::vector<Item>& items, const std::string& path,
                     const std::string& file) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_system_error("cannot create " + path, errno);
  FileInfo info;
  info.file = file;
  uint64_t offset = 0;
  for (const Item& it : items) {
    Entry e;
    e.name = it.name;
    e.kind = it.kind;
    e.dtype = it.local.dtype();
    e.shape = it.full_shape;
    e.offset = offset;
    const size_t es = dtype_size(e.dtype);
    const Tensor host =
        it.local.to(tensor::Device::cpu());  // a GPU's tensors are written from a copy
    const auto* base = static_cast<const char*>(host.data_ptr());
    uint64_t h = fnv1a(nullptr, 0);
    for (const Run& run : it.region) {
      const char* bytes = base + run.local * static_cast<int64_t>(es);
      const size_t n = static_cast<size_t>(run.length) * es;
      out.write(bytes, static_cast<std::streamsize>(n));
      h = fnv1a(bytes, n, h);
      e.runs.emplace_back(run.logical, run.length);
      offset += n;
    }
    e.bytes = offset - e.offset;
    e.fnv = h;
    info.entries.push_back(std::move(e));
  }
  out.flush();
  if (!out) throw_system_error("cannot write " + path, errno);
  info.bytes = offset;
  return info;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every rank learns whether all succeeded; if not, every rank throws the first failure's text
// (of `kind`), so that one rank's bad file fails the job at once, not at a later collective.
void agree(Communicator& world, const std::string& error, ErrorKind kind = ErrorKind::kSystem) {
  const std::vector<std::string> all = gather_strings(world, error);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) throw Error(kind, "rank " + std::to_string(r) + ": " + all[r]);
}

// Reads entries of a checkpoint on demand, verifying each entry's bytes once.
class Reader {
 public:
  Reader(std::string dir, Manifest m) : dir_(std::move(dir)), m_(std::move(m)) {
    for (size_t f = 0; f < m_.files.size(); ++f)
      for (size_t e = 0; e < m_.files[f].entries.size(); ++e) {
        const Entry& x = m_.files[f].entries[e];
        index_[{x.name, x.kind}].push_back({f, e});
      }
  }
  const Manifest& manifest() const { return m_; }
  bool has(const std::string& name, const std::string& kind) const {
    return index_.count({name, kind}) > 0;
  }

  // Fills the elements of `local` (contiguous) that `region` covers from the checkpoint's
  // (name, kind) entries; throws when an element is in none.
  void fill(Tensor& local, const Region& region, const std::string& name, const std::string& kind,
            const tensor::Shape& full_shape) {
    if (!local.device().is_cpu()) {  // a GPU's tensor is filled through a host copy
      Tensor host = local.to(tensor::Device::cpu());
      fill(host, region, name, kind, full_shape);
      local.copy_(host);
      return;
    }
    auto it = index_.find({name, kind});
    CHORUS_ARG_CHECK(it != index_.end(), "checkpoint ", dir_, ": no ", kind, " of '", name,
                     "' in any file (a partial checkpoint, or another model)");
    const size_t es = dtype_size(local.dtype());
    auto* base = static_cast<char*>(local.data_ptr());
    int64_t covered = 0, wanted = 0;
    for (const Run& need : region) wanted += need.length;
    for (const auto& [f, e] : it->second) {
      const Entry& x = m_.files[f].entries[e];
      CHORUS_ARG_CHECK(x.shape == full_shape, "checkpoint ", dir_, ": '", name, "' has shape ",
                       tensor::to_string(x.shape), ", the model's is ",
                       tensor::to_string(full_shape), " (another model)");
      CHORUS_ARG_CHECK(x.dtype == local.dtype(), "checkpoint ", dir_, ": ", kind, " of '", name,
                       "' is ", to_string(x.dtype), ", the model holds ", to_string(local.dtype()));
      const std::string* bytes = nullptr;
      int64_t pos = 0;  // element position inside the entry's bytes
      for (const auto& [begin, length] : x.runs) {
        for (const Run& need : region) {
          const int64_t a = std::max(begin, need.logical);
          const int64_t b = std::min(begin + length, need.logical + need.length);
          if (a >= b) continue;
          if (bytes == nullptr) bytes = &entry_bytes(f, e);
          std::memcpy(base + (need.local + (a - need.logical)) * static_cast<int64_t>(es),
                      bytes->data() + (pos + (a - begin)) * static_cast<int64_t>(es),
                      static_cast<size_t>(b - a) * es);
          covered += b - a;
        }
        pos += length;
      }
    }
    CHORUS_ARG_CHECK(covered >= wanted, "checkpoint ", dir_, ": ", wanted - covered, " of the ",
                     wanted, " elements of ", kind, " '", name,
                     "' this rank needs are in no file (a partial checkpoint?)");
  }

 private:
  const std::string& entry_bytes(size_t f, size_t e) {
    auto key = std::make_pair(f, e);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    const FileInfo& file = m_.files[f];
    const Entry& x = file.entries[e];
    const std::string path = (fs::path(dir_) / file.file).string();
    if (!sizes_checked_.count(f)) {
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      CHORUS_ARG_CHECK(!ec, "checkpoint ", dir_, ": ", file.file, " is missing (", ec.message(),
                       ")");
      CHORUS_ARG_CHECK(size == file.bytes, "checkpoint ", dir_, ": ", file.file, " has ", size,
                       " bytes, the manifest says ", file.bytes, " (truncated?)");
      sizes_checked_.insert({f, true});
    }
    std::ifstream in(path, std::ios::binary);
    CHORUS_ARG_CHECK(in.good(), "checkpoint ", dir_, ": ", file.file, " cannot be read");
    std::string data(x.bytes, '\0');
    in.seekg(static_cast<std::streamoff>(x.offset));
    in.read(data.data(), static_cast<std::streamsize>(x.bytes));
    CHORUS_ARG_CHECK(static_cast<uint64_t>(in.gcount()) == x.bytes, "checkpoint ", dir_, ": ",
                     file.file, " ends inside ", x.kind, " of '", x.name, "' (truncated?)");
    CHORUS_ARG_CHECK(fnv1a(data.data(), data.size()) == x.fnv, "checkpoint ", dir_, ": ", file.file,
                     ": the bytes of ", x.kind, " of '", x.name,
                     "' do not match their checksum (corrupt)");
    return cache_.emplace(key, std::move(data)).first->second;
  }

  std::string dir_;
  Manifest m_;
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<size_t, size_t>>> index_;
  std::map<std::pair<size_t, size_t>, std::string> cache_;
  std::map<size_t, bool> sizes_checked_;
};

Manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  CHORUS_ARG_CHECK(fs::exists(path), "checkpoint ", dir,
                   ": no manifest.json (not a checkpoint, or a save that did not finish)");
  return parse_manifest(read_file(path), path);
}

// Replaces `dir` by `tmp` (the old one kept aside until the new one is in place).
void replace_directory(const std::string& tmp, const std::string& dir) {
  const std::string old = dir + ".old";
  std::error_code ec;
  fs::remove_all(old, ec);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old, ec);
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointState& s) {
  CHORUS_ARG_CHECK(s.model != nullptr && s.mesh != nullptr, "save_checkpoint: no model or mesh");
  CHORUS_ARG_CHECK(
      (s.expert_optimizer == nullptr && s.expert_zero == nullptr) == (s.expert_replicas == nullptr),
      "save_checkpoint: the experts' optimizer and their replicas go together");
  Communicator& world = s.mesh->world();
  const std::string tmp = dir + ".tmp";
  std::string error;
  if (world.rank() == 0) {
    try {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      fs::create_directories(tmp);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(world, error);
  FileInfo mine;
  try {
    tensor::NoGradGuard no_grad;
    mine = write_items(items_to_save(s), (fs::path(tmp) / file_name(world.rank())).string(),
                       file_name(world.rank()));
    if (world.rank() == 1 && injected_fault() == Fault::kCheckpointWrite)  // tests only
      throw Error(ErrorKind::kSystem, "cannot write " + file_name(1) + ": injected failure");
  } catch (const Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(world, error);
  const std::vector<std::string> infos = gather_strings(world, to_json(mine));
  if (world.rank() == 0) {
    try {
      Manifest m;
      m.step = s.step;
      m.scalars = s.scalars;
      m.scalars["optimizer.step"] =
          static_cast<double>(s.zero ? s.zero->step_count() : s.optimizer->step_count());
      m.model = model_fields(s.model->config());
      m.mesh = mesh_text(s);
      for (const std::string& j : infos) m.files.push_back(parse_file_info(j, "a rank's entries"));
      std::ofstream out((fs::path(tmp) / "manifest.json").string(), std::ios::trunc);
      out << to_json(m);
      out.flush();
      if (!out) throw_system_error("cannot write the manifest of " + tmp, errno);
      out.close();
      replace_directory(tmp, dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(world, error);
  CHORUS_INFO(kLogPar, "checkpoint saved to ", dir, " at step ", s.step);
}

namespace {

// The AdamW state of every parameter `opt` updates (whole on this rank): from the checkpoint;
// a master copy the checkpoint lacks (saved from 32-bit parameters) is the values.
void load_adamw_state(Reader& reader, tensor::nn::GPT& model, tensor::optim::AdamW& opt) {
  const tensor::nn::NamedTensors state = opt.state_dict();
  for (const auto& [name, p] : opt.params()) {
    tensor::Shape full;
    const Region r = param_region(model, name, p, &full);
    for (const char* kind : kKinds)
      if (const Tensor* t = find(state, name + "." + kind)) {
        Tensor target = *t;
        if (std::string(kind) == "master" && !reader.has(name, kind)) {
          target.copy_(p);
          continue;
        }
        reader.fill(target, r, name, kind, full);
      }
  }
}

// The pieces of the shard `zero` holds: their values (ZeRO-3 keeps only those) and AdamW state.
void load_zero_state(Reader& reader, tensor::nn::GPT& model, ZeroOptimizer& zero) {
  const tensor::nn::NamedTensors named = model.named_parameters();
  tensor::optim::AdamW& opt = zero.shard_optimizer();
  const tensor::nn::NamedTensors state = opt.state_dict();
  for (const auto& info : zero.shard_layout()) {
    if (info.owned_begin == info.owned_end) continue;
    tensor::Shape full;
    const Region r = sub_region(param_region(model, info.name, *find(named, info.name), &full),
                                info.owned_begin, info.owned_end);
    Tensor piece = *find(opt.params(), info.name);
    reader.fill(piece, r, info.name, "param", full);
    for (const char* kind : kKinds)
      if (const Tensor* t = find(state, info.name + "." + kind)) {
        Tensor target = *t;
        if (std::string(kind) == "master" && !reader.has(info.name, kind)) {
          target.copy_(piece);  // a checkpoint from 32-bit parameters: the values are the master
          continue;
        }
        reader.fill(target, r, info.name, kind, full);
      }
  }
}

// load_checkpoint's work on this rank; throws what is wrong.
Manifest load_here(const std::string& dir, CheckpointState& s) {
  Reader reader(dir, read_manifest(dir));
  const Manifest& m = reader.manifest();
  const std::map<std::string, int64_t> mine = model_fields(s.model->config());
  for (const auto& [field, value] : mine) {
    auto it = m.model.find(field);
    CHORUS_ARG_CHECK(it != m.model.end() && it->second == value, "checkpoint ", dir,
                     " holds another model: ", field, " ",
                     it == m.model.end() ? std::string("missing") : std::to_string(it->second),
                     ", this one has ", value);
  }
  for (const auto& [field, value] : m.model)
    CHORUS_ARG_CHECK(mine.count(field) != 0, "checkpoint ", dir, " holds another model: ", field,
                     " ", value, ", this one has none");
  tensor::NoGradGuard no_grad;
  tensor::nn::GPT& model = *s.model;
  const tensor::nn::NamedTensors named = model.named_parameters();
  // Parameters this rank holds whole (storage live): a pipeline stage's, the lm_head's copy of
  // the embedding, every parameter of a DDP or ZeRO-1/2 replica.
  for (const auto& [name, p] : named) {
    if (p.storage()->released()) continue;
    tensor::Shape full;
    Tensor t = p;
    reader.fill(t, param_region(model, name, p, &full), name, "param", full);
  }
  if (s.zero != nullptr) {
    load_zero_state(reader, model, *s.zero);
  } else {
    CHORUS_ARG_CHECK(s.optimizer != nullptr, "load_checkpoint: no optimizer (AdamW or ZeRO)");
    load_adamw_state(reader, model, *s.optimizer);
  }
  if (s.expert_optimizer != nullptr) load_adamw_state(reader, model, *s.expert_optimizer);
  if (s.expert_zero != nullptr) load_zero_state(reader, model, *s.expert_zero);
  const auto step = m.scalars.find("optimizer.step");
  const tensor::nn::NamedTensors steps{
      {"step", Tensor::full({}, step == m.scalars.end() ? 0.0 : step->second, DataType::kI64)}};
  if (s.zero != nullptr)
    s.zero->shard_optimizer().load_state_dict(steps);
  else
    s.optimizer->load_state_dict(steps);
  if (s.expert_optimizer != nullptr) s.expert_optimizer->load_state_dict(steps);
  if (s.expert_zero != nullptr) s.expert_zero->shard_optimizer().load_state_dict(steps);
  return m;
}

}  // namespace

CheckpointInfo load_checkpoint(const std::string& dir, CheckpointState& s) {
  CHORUS_ARG_CHECK(s.model != nullptr && s.mesh != nullptr, "load_checkpoint: no model or mesh");
  CHORUS_ARG_CHECK(
      (s.expert_optimizer == nullptr && s.expert_zero == nullptr) == (s.expert_replicas == nullptr),
      "load_checkpoint: the experts' optimizer and their replicas go together");
  Manifest m;
  std::string error;
  try {
    m = load_here(dir, s);
  } catch (const Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(s.mesh->world(), error, ErrorKind::kInvalidArgument);
  CheckpointInfo info;
  info.step = m.step;
  info.scalars = m.scalars;
  info.scalars.erase("optimizer.step");
  info.saved_mesh = m.mesh;
  s.step = m.step;
  return info;
}

namespace {

// Names compared with their runs of digits as numbers: "h.2.x" < "h.10.x".
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) != 0 &&
        std::isdigit(static_cast<unsigned char>(b[j])) != 0) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie])) != 0) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je])) != 0) ++je;
      const std::string da = a.substr(i, ie - i), db = b.substr(j, je - j);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

void export_checkpoint(const std::string& dir, const std::string& file) {
  Reader reader(dir, read_manifest(dir));
  const Manifest& m = reader.manifest();
  // Every (name, kind), assembled whole, in an order that does not depend on the mesh that saved
  // it (so that runs on different meshes export the same file): parameters first, then each
  // kind of optimizer state, names in natural order ("h.2" before "h.10").
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::pair<tensor::Shape, DataType>> meta;
  for (const FileInfo& f : m.files)
    for (const Entry& e : f.entries)
      if (meta.emplace(std::make_pair(e.name, e.kind), std::make_pair(e.shape, e.dtype)).second)
        order.emplace_back(e.name, e.kind);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if ((a.second == "param") != (b.second == "param")) return a.second == "param";
    if (a.second != b.second) return a.second < b.second;
    return natural_less(a.first, b.first);
  });
  tensor::nn::NamedTensors out;
  for (const auto& key : order) {
    const auto& [shape, dtype] = meta[key];
    Tensor t = Tensor::zeros(shape, dtype);
    reader.fill(t, whole_region(t.numel()), key.first, key.second, shape);
    out.emplace_back(key.second == "param" ? key.first : key.first + "." + key.second, t);
  }
  out.emplace_back("step", Tensor::full({}, static_cast<double>(m.step), DataType::kI64));
  for (const auto& [k, v] : m.model)
    out.emplace_back("config." + k, Tensor::full({}, static_cast<double>(v), DataType::kI64));
  for (const auto& [k, v] : m.scalars)
    out.emplace_back("scalar." + k, Tensor::full({}, v, DataType::kF64));
  tensor::save_tensors(file, out);
}

void import_checkpoint(const std::string& file, const std::string& dir) {
  const tensor::nn::NamedTensors in = tensor::load_tensors(file);
  Manifest m;
  m.mesh = "dp=1 tp=1 pp=1 zero=0";
  std::vector<Item> items;
  for (const auto& [name, t] : in) {
    if (name == "step") {
      m.step = static_cast<int64_t>(t.item());
    } else if (name.rfind("config.", 0) == 0) {
      m.model[name.substr(7)] = static_cast<int64_t>(t.item());
    } else if (name.rfind("scalar.", 0) == 0) {
      m.scalars[name.substr(7)] = t.item();
    } else {
      std::string base = name, kind = "param";
      for (const char* k : kKinds) {
        const std::string suffix = std::string(".") + k;
        if (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
          base = name.substr(0, name.size() - suffix.size());
          kind = k;
        }
      }
      items.push_back({base, kind, t.contiguous(), whole_region(t.numel()), t.shape()});
    }
  }
  // The dense model's five fields (a mixture of experts adds two: model_fields).
  for (const char* field : {"vocab", "context", "layers", "heads", "width"})
    CHORUS_ARG_CHECK(m.model.count(field) != 0, file, ": no model configuration (config.", field,
                     ", ...): not an exported checkpoint");
  const std::string tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  m.files.push_back(write_items(items, (fs::path(tmp) / file_name(0)).string(), file_name(0)));
  std::ofstream((fs::path(tmp) / "manifest.json").string(), std::ios::trunc) << to_json(m);
  replace_directory(tmp, dir);
}

}  // namespace chorus::parallel
