// chorus — setting up the shm transport (shm_transport.h): the settings, this rank's segment,
// connecting to every peer's, and what the ranks find out about each other on the way (single
// copy, device IPC, puts).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/timeout.h"
#include "chorus/unique_fd.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_device.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_transport.h"

namespace chorus::transport {
namespace {

const IntKnob kSlotBytes{"CHORUS_SHM_SLOT_BYTES", 64 << 10,
                         "payload bytes per shm FIFO slot (multiple of 64, at least 128)"};
const IntKnob kDepth{"CHORUS_SHM_DEPTH", 8, "slots per shm FIFO (per ordered pair of ranks)"};
// 32 KiB: from there the single copy beats the FIFO's two for every collective at np=2
// (docs/perf/collectives.md, "The single-copy threshold"); below it the system call costs more.
const IntKnob kCmaThreshold{"CHORUS_SHM_CMA_THRESHOLD", 32 << 10,
                            "messages of at least this many bytes move single-copy (CMA)"};
const IntKnob kCma{"CHORUS_SHM_CMA", 1, "1 = allow single-copy process_vm_readv between ranks"};
// The shared buffer a rank sends one message to every peer through (a broadcast root): room for
// 8 pieces of 64 KiB; smaller messages take only their own size, so many fit at once. A 2 MiB
// buffer (256 KiB pieces) moved 64 MiB no faster and let the writer of small messages run so
// far ahead that its readers copied from beyond L2: np=2 4 KiB broadcast 1.8-3.5 us per call
// against 0.36-0.39 (docs/perf/collectives.md, "The fan-out buffer").
const IntKnob kFanSlotBytes{"CHORUS_SHM_FAN_SLOT_BYTES", 64 << 10,
                            "largest piece (payload bytes, multiple of 64) of a rank's shared "
                            "fan-out buffer"};
const IntKnob kFanDepth{"CHORUS_SHM_FAN_DEPTH", 8,
                        "a rank's shared fan-out buffer holds this many of its largest pieces"};
const StringKnob kHostId{"CHORUS_HOST_ID", "",
                         "identity of this host (default hostname + boot id); ranks with equal "
                         "ids share memory"};

const IntKnob kCmaChunkBytes{"CHORUS_SHM_CMA_CHUNK_BYTES", 4 << 20,
                             "pipelining unit when every peer is read single-copy"};
// Two chunks per peer this rank sends device memory to (shm_device.h): 32 MiB of device memory per
// such peer. A piece costs the sender a device copy and both sides an event poll, so pieces must
// be large for the copies to dominate.
const IntKnob kIpcChunkBytes{"CHORUS_GPU_IPC_CHUNK_BYTES", 16 << 20,
                             "bytes of one of the two chunks of a rank's device outbox per peer "
                             "(the IPC path's pieces of device messages)"};
const IntKnob kIpcMappings{"CHORUS_GPU_IPC_MAPPINGS", 64,
                           "peer device allocations kept mapped (IPC) per peer; the least "
                           "recently used is unmapped beyond it"};

// A segment name is taken: by another job with the same names, or by a crashed job's leftover.
// The creator's pid in the segment's header tells which.
[[noreturn]] void throw_segment_taken(const std::string& name, const std::string& prefix) {
  std::string owner = "its creator is unknown";
  if (const UniqueFd fd(::shm_open(name.c_str(), O_RDONLY, 0)); fd) {
    shm::SegmentHeader h{};
    if (::pread(fd.get(), &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
        h.magic == shm::kSegmentMagic)
      owner = ::kill(h.pid, 0) == 0 || errno == EPERM
                  ? detail::concat("made by pid ", h.pid, ", which is running")
                  : detail::concat("made by pid ", h.pid,
                                   ", which has ended: a crashed job's leftover");
  }
  throw Error(ErrorKind::kInvalidArgument,
              detail::concat("shared memory segment /dev/shm", name, " already exists (", owner,
                             "): another job on this host uses the same CHORUS_JOB_ID (this "
                             "communicator's segments are /dev/shm",
                             prefix,
                             "-<rank>). Give each job its own CHORUS_JOB_ID, or leave it unset "
                             "(chorus-run then picks a fresh one); remove a leftover with rm "
                             "/dev/shm",
                             prefix, "-*"));
}

}  // namespace

ShmOptions ShmOptions::from_env() {
  ShmOptions o;
  o.slot_bytes = static_cast<size_t>(kSlotBytes.get());
  o.depth = static_cast<size_t>(kDepth.get());
  o.cma_threshold = static_cast<size_t>(kCmaThreshold.get());
  o.cma = kCma.get() != 0;
  o.fan_slot_bytes = static_cast<size_t>(kFanSlotBytes.get());
  o.fan_depth = static_cast<size_t>(kFanDepth.get());
  CHORUS_ARG_CHECK(
      o.slot_bytes >= shm::kMinSlotBytes && o.slot_bytes % 64 == 0 && o.slot_bytes <= (1u << 30),
      "CHORUS_SHM_SLOT_BYTES=", o.slot_bytes, " must be a multiple of 64 in [", shm::kMinSlotBytes,
      ", 1G]");
  CHORUS_ARG_CHECK(o.depth >= 2 && o.depth <= 1024, "CHORUS_SHM_DEPTH=", o.depth,
                   " must be in [2, 1024]");
  CHORUS_ARG_CHECK(
      o.fan_slot_bytes >= 64 && o.fan_slot_bytes % 64 == 0 && o.fan_slot_bytes <= (1u << 30),
      "CHORUS_SHM_FAN_SLOT_BYTES=", o.fan_slot_bytes, " must be a multiple of 64 in [64, 1G]");
  CHORUS_ARG_CHECK(o.fan_depth >= 2 && o.fan_depth <= 1024, "CHORUS_SHM_FAN_DEPTH=", o.fan_depth,
                   " must be in [2, 1024]");
  return o;
}

std::string local_host_id() {
  if (auto id = kHostId.get_if_set()) return *id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

ShmTransport::ShmTransport(int rank, int world_size, Store& store,
                           const std::string& segment_prefix, std::chrono::milliseconds timeout,
                           const ShmOptions& options, std::span<const int> members)
    : rank_(rank),
      world_size_(world_size),
      members_(members.begin(), members.end()),
      options_(options),
      layout_{static_cast<size_t>(world_size), options.slot_bytes, options.depth,
              options.fan_slot_bytes, options.fan_depth} {
  if (members_.empty())
    for (int p = 0; p < world_size; ++p) members_.push_back(p);
  const std::string name = segment_prefix + "-" + std::to_string(rank);
  create_segment(name, segment_prefix);
  const std::string host = local_host_id();
  store.set("shm/" + std::to_string(rank),
            detail::concat(::getpid(), " ", reinterpret_cast<uint64_t>(&header()->probe), " ",
                           options.slot_bytes, " ", options.depth, " ", options.fan_slot_bytes, " ",
                           options.fan_depth, " ", name, " ", host));

  std::vector<pid_t> pids(world_size, 0);
  peers_.resize(world_size);
  for (int p : members_)
    if (p != rank) pids[p] = connect_peer(p, store, timeout, host);
  decide_device_ipc();

  // Everyone has mapped everything: the names can go.
  store.set("shm_mapped/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int p : members_) keys.push_back("shm_mapped/" + std::to_string(p));
  store.wait(keys, timeout);
  own_.unlink();

  // Liveness: a pidfd per peer becomes readable when that process ends.
  pidfds_.resize(world_size);
  for (int p : members_)
    if (p != rank) pidfds_[p].reset(static_cast<int>(::syscall(SYS_pidfd_open, pids[p], 0)));
  make_links(pids);
  fix_capabilities(find_capabilities());
}

// Creates and fills in this rank's segment; nothing else knows its name yet.
void ShmTransport::create_segment(const std::string& name, const std::string& segment_prefix) {
  try {
    own_ = ShmSegment::create(name, layout_.total_bytes());
  } catch (const ShmSegmentExists&) {
    throw_segment_taken(name, segment_prefix);
  }
  auto* hdr = header();
  hdr->magic = shm::kSegmentMagic;
  hdr->world_size = static_cast<uint32_t>(world_size_);
  hdr->rank = static_cast<uint32_t>(rank_);
  hdr->pid = ::getpid();
  hdr->slot_bytes = static_cast<uint32_t>(options_.slot_bytes);
  hdr->depth = static_cast<uint32_t>(options_.depth);
  hdr->fan_slot_bytes = static_cast<uint32_t>(options_.fan_slot_bytes);
  hdr->fan_depth = static_cast<uint32_t>(options_.fan_depth);
  hdr->probe = shm::kSegmentMagic ^ static_cast<uint64_t>(rank_);
  // Single copy is ptrace-class access between sibling processes, which the Yama LSM's default
  // scope (1, "relational": Ubuntu's default) refuses unless the process being read names its
  // reader. Ranks cannot name each other (one tracer per process), so a rank that allows single
  // copy (CHORUS_SHM_CMA=1) lets any process of its user read it; the kernel's ownership check
  // still applies. Without Yama the call fails with EINVAL and changes nothing.
#ifdef PR_SET_PTRACER
  if (options_.cma) (void)::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  const std::string signature = shm::device_ipc_signature();
  std::memcpy(hdr->gpu_signature, signature.c_str(), signature.size() + 1);
}

// Reads what peer `p` published, checks that it runs with this rank's settings on this host,
// maps its segment and finds whether this rank can read its memory (then p may send to this rank
// single copy). Returns p's pid.
pid_t ShmTransport::connect_peer(int p, Store& store, std::chrono::milliseconds timeout,
                                 const std::string& host) {
  std::string info;
  try {
    info = store.get("shm/" + std::to_string(p), timeout);
  } catch (const Timeout&) {
    throw Timeout(detail::concat("rank ", p, " did not join within ", describe_timeout(timeout),
                                 " (is it running, with the same world size and master "
                                 "address? CHORUS_TIMEOUT sets the deadline)"),
                  rank_, "connect", -1, p);
  }
  std::istringstream in(info);
  long pid = 0;
  uint64_t probe_addr = 0;
  std::string peer_name, peer_host;
  size_t settings[4] = {};
  in >> pid >> probe_addr >> settings[0] >> settings[1] >> settings[2] >> settings[3] >> peer_name;
  std::getline(in >> std::ws, peer_host);
  // Checked before mapping: the settings size the segment.
  const size_t mine[4] = {options_.slot_bytes, options_.depth, options_.fan_slot_bytes,
                          options_.fan_depth};
  constexpr const char* kSettingNames[4] = {"CHORUS_SHM_SLOT_BYTES", "CHORUS_SHM_DEPTH",
                                            "CHORUS_SHM_FAN_SLOT_BYTES", "CHORUS_SHM_FAN_DEPTH"};
  for (int k = 0; k < 4; ++k)
    if (settings[k] != mine[k])
      throw InvalidArgument(
          detail::concat("rank ", p, " runs with ", kSettingNames[k], "=", settings[k],
                         " and this rank with ", mine[k], ": every rank must use the same"),
          rank_);
  if (peer_host != host)
    throw Error(ErrorKind::kInvalidArgument,
                detail::concat("rank ", p, " runs on another host (", peer_host, " vs ", host,
                               "); the shm transport connects ranks of one host only"),
                rank_);
  peers_[p] = ShmSegment::open(peer_name, layout_.total_bytes());
  const auto* peer_hdr = static_cast<const shm::SegmentHeader*>(peers_[p].data());
  CHORUS_CHECK_EQ(peer_hdr->magic, shm::kSegmentMagic, "segment of rank ", p);
  CHORUS_CHECK(peer_hdr->slot_bytes == options_.slot_bytes && peer_hdr->depth == options_.depth &&
                   peer_hdr->fan_slot_bytes == options_.fan_slot_bytes &&
                   peer_hdr->fan_depth == options_.fan_depth,
               "rank ", p, "'s segment does not hold the settings it published");
  // Can this rank read peer p's memory directly? Then p may send to us single-copy.
  uint64_t probe = 0;
  const bool cma = options_.cma &&
                   shm::cma_read(static_cast<pid_t>(pid), &probe, probe_addr, sizeof probe) == 0 &&
                   probe == (shm::kSegmentMagic ^ static_cast<uint64_t>(p));
  auto* in_ctrl = reinterpret_cast<shm::FifoCtrl*>(static_cast<std::byte*>(own_.data()) +
                                                   shm::Layout::kCtrlOffset);
  in_ctrl[p].cma_ok.store(cma ? 1 : 0, std::memory_order_release);
  CHORUS_INFO(kLogShm, "rank ", p, " -> ", rank_, ": ", cma ? "single-copy (CMA)" : "copy via FIFO",
              " above ", options_.cma_threshold, " bytes");
  return static_cast<pid_t>(pid);
}

// Device memory through IPC: when every rank of the communicator is here and all publish the
// same GPU signature (shm_device.h).
void ShmTransport::decide_device_ipc() {
  if (members_.size() == static_cast<size_t>(world_size_)) {
    std::vector<std::string> signatures(world_size_);
    for (int p = 0; p < world_size_; ++p) {
      const auto& h = p == rank_ ? *header() : peer_header(p);
      signatures[p] =
          std::string(h.gpu_signature, strnlen(h.gpu_signature, sizeof h.gpu_signature));
    }
    device_ipc_ = shm::signatures_allow_ipc(signatures, &no_device_ipc_);
  } else {
    no_device_ipc_ = "the ranks span hosts";
  }
  CHORUS_INFO(
      kLogShm, "rank ", rank_, ": device memory ",
      device_ipc_ ? "can move through IPC" : "moves through host memory (" + no_device_ipc_ + ")");
}

// What the links found, fixed from here on. Every peer read single copy: a larger chunk (no FIFO
// to keep in cache, and each chunk costs a hand-shake).
Capabilities ShmTransport::find_capabilities() const {
  Capabilities c;
  bool fifo_somewhere = false, single_copy_somewhere = false;
  for (int p : members_) {
    if (p == rank_) continue;
    (links_[p]->single_copy() ? single_copy_somewhere : fifo_somewhere) = true;
  }
  if (!fifo_somewhere) c.chunk_bytes = static_cast<size_t>(kCmaChunkBytes.get());
  if (single_copy_somewhere) c.single_copy_from = options_.cma_threshold;
  c.fans_out = every_rank_here();
  c.puts_to_all = find_puts_to_all();
  c.moves_device_memory = device_ipc_;
  c.host_memory_only = no_device_ipc_;
  return c;
}

// Every rank has probed every peer by now (before its shm_mapped key), and each segment holds
// what its rank found: single copy between every pair, read from all segments alike, is the
// same answer on every rank. Writing a process's memory takes the same permission as reading.
bool ShmTransport::find_puts_to_all() const {
  bool all = every_rank_here();
  for (int q : members_) {
    const std::byte* base =
        static_cast<const std::byte*>(q == rank_ ? own_.data() : peers_[q].data());
    const auto* ctrl = reinterpret_cast<const shm::FifoCtrl*>(base + shm::Layout::kCtrlOffset);
    for (int p : members_)
      if (p != q && ctrl[p].cma_ok.load(std::memory_order_acquire) == 0) all = false;
  }
  return all;
}

// The fan-out buffer's writer and readers, and a link per peer.
void ShmTransport::make_links(const std::vector<pid_t>& pids) {
  const size_t ipc_mappings = static_cast<size_t>(std::max<int64_t>(1, kIpcMappings.get()));
  const int64_t ipc_chunk = kIpcChunkBytes.get();
  // Whole elements of every type in every piece, and aligned pieces for the copy kernels.
  CHORUS_ARG_CHECK(ipc_chunk >= 4096 && ipc_chunk <= (int64_t{1} << 32) && ipc_chunk % 256 == 0,
                   "CHORUS_GPU_IPC_CHUNK_BYTES=", ipc_chunk,
                   " must be a multiple of 256 in [4096, 4G]");
  auto* own_base = static_cast<std::byte*>(own_.data());
  std::vector<std::byte*> bases(world_size_, nullptr);
  for (int p : members_)
    bases[p] = p == rank_ ? own_base : static_cast<std::byte*>(peers_[p].data());
  fan_ = shm::FanBuffer(layout_, rank_, members_, bases);
  links_.resize(world_size_);
  for (int p : members_) {
    if (p == rank_) continue;
    links_[p] = std::make_unique<ShmLink>(*this, p, pids[p], layout_, own_base, bases[p], rank_,
                                          staging_, options_.cma_threshold, ipc_mappings,
                                          static_cast<size_t>(ipc_chunk), fan_.reader(p));
  }
}

}  // namespace chorus::transport
