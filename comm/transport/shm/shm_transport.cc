// chorus — the shm transport as a whole (shm_transport.h): its links, the operation's path and
// abandoning a failed operation. Set-up is in shm_setup.cc, peer monitoring in shm_peers.cc, the
// links' paths in shm_fifo.cc, shm_rendezvous.cc, shm_forward.cc, shm_fan.cc and
// shm_link_device.cc.
#include "transport/shm/shm_transport.h"

#include <unistd.h>

#include "chorus/error.h"
#include "transport/shm/shm_link.h"

namespace chorus::transport {
ShmTransport::~ShmTransport() { close_device_memory(); }

const shm::SegmentHeader& ShmTransport::peer_header(int p) const {
  return *static_cast<const shm::SegmentHeader*>(peers_[p].data());
}

// A failed operation may have left a message half written; the communicator is not used again,
// but nothing may go on reading the caller's buffer.
void ShmTransport::abandon() {
  abandoned_ = true;
  fan_.abandon();
}

Link& ShmTransport::link(int peer) {
  CHORUS_CHECK(peer >= 0 && peer < world_size_ && peer != rank_, "no link to rank ", peer);
  return *links_[peer];
}

void ShmTransport::set_single_copy(bool allowed) {
  for (auto& l : links_)
    if (l) l->set_single_copy(allowed);
}

}  // namespace chorus::transport
