#include "tagged_output.h"

#include <fcntl.h>

#include <cerrno>

#include "chorus/error.h"

namespace chorus::run {
namespace {

// Writes all of `data`, waiting when the sink is a full non-blocking pipe. Output that cannot be
// written (a closed pipe) is dropped: the ranks keep running regardless.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return;
    }
  }
}

}  // namespace

std::string LineTagger::feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const size_t take = newline == std::string_view::npos ? data.size() : newline + 1;
    partial_.append(data.substr(0, take));
    data.remove_prefix(take);
    if (partial_.back() == '\n' || partial_.size() >= kMaxLine) {
      out += tag_;
      out += partial_;
      if (out.back() != '\n') out += '\n';
      partial_.clear();
    }
  }
  return out;
}

std::string LineTagger::finish() {
  if (partial_.empty()) return {};
  std::string out = tag_ + partial_ + '\n';
  partial_.clear();
  return out;
}

void TaggedOutput::add(std::string tag, UniqueFd source, int sink) {
  const int flags = CHORUS_SYSCALL(::fcntl(source.get(), F_GETFL));
  CHORUS_SYSCALL(::fcntl(source.get(), F_SETFL, flags | O_NONBLOCK));
  streams_.push_back(Stream{std::move(source), sink, LineTagger(std::move(tag))});
}

void TaggedOutput::add_pollfds(std::vector<pollfd>& fds) const {
  for (const Stream& s : streams_) fds.push_back(pollfd{s.source.get(), POLLIN, 0});
}

bool TaggedOutput::copy_available(Stream& stream) {
  char buffer[64 * 1024];
  for (;;) {
    ssize_t n = ::read(stream.source.get(), buffer, sizeof buffer);
    if (n > 0) {
      write_all(stream.sink, stream.tagger.feed(std::string_view(buffer, static_cast<size_t>(n))));
      // Level-triggered poll brings us back for the rest; one read per turn keeps ranks fair.
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    write_all(stream.sink, stream.tagger.finish());
    return false;
  }
}

void TaggedOutput::service(std::span<const pollfd> fds) {
  CHORUS_CHECK_EQ(fds.size(), streams_.size());
  std::vector<Stream> open;
  open.reserve(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i)
    if (fds[i].revents == 0 || copy_available(streams_[i])) open.push_back(std::move(streams_[i]));
  streams_ = std::move(open);
}

void TaggedOutput::drain(std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  std::vector<pollfd> fds;
  while (!streams_.empty()) {
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) break;
    fds.clear();
    add_pollfds(fds);
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
    if (ready < 0 && errno != EINTR) throw_system_error("poll", errno);
    if (ready > 0) service(fds);
  }
  for (Stream& s : streams_) write_all(s.sink, s.tagger.finish());
  streams_.clear();
}

}  // namespace chorus::run
