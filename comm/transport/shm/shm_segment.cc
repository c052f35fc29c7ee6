#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "chorus/error.h"
#include "chorus/unique_fd.h"

namespace chorus::transport {
namespace {

[[noreturn]] void throw_shm_space_error(const std::string& name, size_t bytes, int err) {
  struct statvfs st {};
  std::string avail = "unknown";
  if (::statvfs("/dev/shm", &st) == 0)
    avail =
        std::to_string(static_cast<unsigned long long>(st.f_bavail) * st.f_frsize >> 20) + " MiB";
  throw Error(ErrorKind::kSystem,
              detail::concat("cannot size shared memory segment /dev/shm", name, " to ",
                             bytes >> 20, " MiB (", std::strerror(err), "); /dev/shm has ", avail,
                             " free. Free space in /dev/shm or enlarge it (docker: --shm-size=1g; "
                             "or lower CHORUS_SHM_SLOT_BYTES / CHORUS_SHM_DEPTH / "
                             "CHORUS_SHM_FAN_SLOT_BYTES / CHORUS_SHM_FAN_DEPTH)"));
}

void* map(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_system_error("mmap of shared memory segment " + name, errno);
  return p;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const UniqueFd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
  if (!fd) {
    if (errno == EACCES || errno == EROFS)
      throw Error(ErrorKind::kSystem,
                  "/dev/shm is not writable (" + std::string(std::strerror(errno)) +
                      "): chorus needs a writable /dev/shm for same-host ranks");
    if (errno == EEXIST)
      throw ShmSegmentExists("shared memory segment /dev/shm" + name + " already exists");
    throw_system_error("shm_open(" + name + ", O_CREAT|O_EXCL)", errno);
  }
  ShmSegment seg;
  seg.name_ = name;
  seg.owner_ = true;
  seg.linked_ = true;
  // posix_fallocate reserves the pages now, so a too-small /dev/shm fails here with a clear
  // message instead of SIGBUS on first touch later.
  if (int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    seg.unlink();
    throw_shm_space_error(name, bytes, err);
  }
  seg.data_ = map(fd.get(), bytes, name);
  seg.size_ = bytes;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const UniqueFd fd(::shm_open(name.c_str(), O_RDWR, 0600));
  if (!fd) throw_system_error("shm_open(" + name + ") of a peer's segment", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_system_error("fstat of " + name, errno);
  // The transport compares the settings that size a segment before it opens one.
  CHORUS_CHECK_EQ(static_cast<size_t>(st.st_size), bytes, "size of peer segment ", name);
  ShmSegment seg;
  seg.name_ = name;
  seg.data_ = map(fd.get(), bytes, name);
  seg.size_ = bytes;
  return seg;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owner_ = std::exchange(o.owner_, false);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

void ShmSegment::unlink() {
  if (owner_ && linked_) {
    ::shm_unlink(name_.c_str());
    linked_ = false;
  }
}

ShmSegment::~ShmSegment() {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
}

}  // namespace chorus::transport
