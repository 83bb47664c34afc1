//===- Rendezvous.cpp - Where the ranks of a job meet, without MPI --------===//
//
// The exchange, on one TCP connection per rank to rank 0:
//   rank r -> 0:  "BRDV", the tag's length (u32) and bytes, r and the world
//                 size (i64 each);
//   0 -> rank r:  a status byte (0: accepted) and, once every rank has
//                 connected, the payload's length (u64) and bytes; or on a
//                 refusal the reason's length and text;
//   rank r -> 0:  one byte, when it holds the payload.
// Integers are little-endian, as every host the runtime builds for is.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Rendezvous.h"

#include "runtime/comm/Slurm.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace braid::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'B', 'R', 'D', 'V'};

/// A socket closed when it goes out of scope.
class Socket {
public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0)
      close(fd_);
  }
  Socket(Socket &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket &operator=(Socket &&o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int fd() const { return fd_; }

private:
  int fd_;
};

std::string errnoText() { return std::strerror(errno); }

/// Milliseconds left until `deadline` (0 when past).
int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return int(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

/// Waits until `fd` has `events`, or the deadline.
absl::Status waitFor(int fd, short events, Clock::time_point deadline,
                     const std::string &what) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, msLeft(deadline));
    if (n > 0)
      return absl::OkStatus();
    if (n == 0)
      return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
    if (errno != EINTR)
      return absl::InternalError(absl::StrCat(what, ": poll: ", errnoText()));
  }
}

absl::Status sendAll(int fd, const void *data, size_t size,
                     Clock::time_point deadline, const std::string &what) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    if (absl::Status s = waitFor(fd, POLLOUT, deadline, what); !s.ok())
      return s;
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return absl::UnavailableError(
          absl::StrCat(what, ": send: ", n < 0 ? errnoText() : "closed"));
    p += n;
    size -= size_t(n);
  }
  return absl::OkStatus();
}

absl::Status recvAll(int fd, void *data, size_t size,
                     Clock::time_point deadline, const std::string &what) {
  char *p = static_cast<char *>(data);
  while (size > 0) {
    if (absl::Status s = waitFor(fd, POLLIN, deadline, what); !s.ok())
      return s;
    ssize_t n = recv(fd, p, size, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return absl::UnavailableError(absl::StrCat(
          what, ": ", n < 0 ? errnoText() : "the connection was closed"));
    p += n;
    size -= size_t(n);
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status sendValue(int fd, T v, Clock::time_point deadline,
                       const std::string &what) {
  return sendAll(fd, &v, sizeof(v), deadline, what);
}

template <typename T>
absl::Status recvValue(int fd, T &v, Clock::time_point deadline,
                       const std::string &what) {
  return recvAll(fd, &v, sizeof(v), deadline, what);
}

/// A length-prefixed string; `limit` bounds what a stranger may make us
/// allocate.
absl::Status recvString(int fd, std::string &s, uint64_t limit,
                        Clock::time_point deadline, const std::string &what) {
  uint64_t n = 0;
  if (absl::Status st = recvValue(fd, n, deadline, what); !st.ok())
    return st;
  if (n > limit)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a message of ", n, " bytes (at most ", limit,
                     " expected): not a rendezvous of this job"));
  s.resize(size_t(n));
  return recvAll(fd, s.data(), s.size(), deadline, what);
}

absl::Status sendString(int fd, const std::string &s,
                        Clock::time_point deadline, const std::string &what) {
  if (absl::Status st = sendValue(fd, uint64_t(s.size()), deadline, what);
      !st.ok())
    return st;
  return sendAll(fd, s.data(), s.size(), deadline, what);
}

std::string address(const RendezvousConfig &c) {
  return absl::StrCat(c.host, ":", c.port);
}

/// The addresses of `host`:`port` (for listening: the wildcard address
/// when `passive`).
absl::StatusOr<addrinfo *> resolve(const RendezvousConfig &c, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo *found = nullptr;
  std::string port = std::to_string(c.port);
  int rc = getaddrinfo(passive ? nullptr : c.host.c_str(), port.c_str(),
                       &hints, &found);
  if (rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_ADDR '", c.host, "': ", gai_strerror(rc)));
  return found;
}

absl::Status serve(const RendezvousConfig &c, const std::string &tag,
                   const std::string &bytes, Clock::time_point deadline) {
  absl::StatusOr<addrinfo *> found = resolve(c, /*passive=*/true);
  if (!found.ok())
    return found.status();
  Socket listener;
  std::string failure = "no address";
  // Prefer IPv6's wildcard (which takes IPv4 too), else the first that
  // binds.
  for (addrinfo *a = *found; a; a = a->ai_next) {
    Socket s(socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    if (s.fd() < 0) {
      failure = errnoText();
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 &&
        listen(s.fd(), int(std::min<int64_t>(c.worldSize, 4096))) == 0) {
      listener = std::move(s);
      break;
    }
    failure = errnoText();
  }
  freeaddrinfo(*found);
  if (listener.fd() < 0)
    return absl::UnavailableError(absl::StrCat(
        "rank 0 cannot listen on port ", c.port, " (MASTER_PORT): ", failure));
  std::vector<Socket> ranks(size_t(c.worldSize));
  int64_t joined = 1;
  while (joined < c.worldSize) {
    if (absl::Status s = waitFor(
            listener.fd(), POLLIN, deadline,
            absl::StrCat("waiting on port ", c.port, " for the job's ",
                         c.worldSize - 1, " other ranks (", joined - 1,
                         " joined)"));
        !s.ok())
      return s;
    Socket peer(accept(listener.fd(), nullptr, nullptr));
    if (peer.fd() < 0)
      continue;
    // A connection that does not speak the rendezvous, or is of another
    // job, is answered (when it can be) and dropped; the wait goes on.
    auto refuse = [&](const std::string &why) {
      (void)sendValue(peer.fd(), uint8_t(1), deadline, "refusing a rank");
      (void)sendString(peer.fd(), why, deadline, "refusing a rank");
    };
    char magic[4];
    std::string theirTag;
    int64_t rank = -1, world = -1;
    // A stranger gets a few seconds, not the whole timeout.
    Clock::time_point soon =
        std::min(deadline, Clock::now() + std::chrono::seconds(10));
    if (!recvAll(peer.fd(), magic, 4, soon, "a joining rank").ok() ||
        std::memcmp(magic, kMagic, 4) != 0 ||
        !recvString(peer.fd(), theirTag, 4096, soon, "a joining rank").ok() ||
        !recvValue(peer.fd(), rank, soon, "a joining rank").ok() ||
        !recvValue(peer.fd(), world, soon, "a joining rank").ok())
      continue;
    if (theirTag != tag || world != c.worldSize) {
      refuse(absl::StrCat("rank 0 at ", address(c), " runs '", tag, "' over ",
                          c.worldSize, " ranks, not '", theirTag, "' over ",
                          world));
      continue;
    }
    if (rank < 1 || rank >= c.worldSize || ranks[size_t(rank)].fd() >= 0) {
      refuse(absl::StrCat("rank ", rank, " is ",
                          rank < 1 || rank >= c.worldSize
                              ? absl::StrCat("not in [1, ", c.worldSize, ")")
                              : std::string("taken by another process")));
      continue;
    }
    if (!sendValue(peer.fd(), uint8_t(0), deadline, "accepting a rank").ok())
      continue;
    ranks[size_t(rank)] = std::move(peer);
    ++joined;
  }
  for (int64_t r = 1; r < c.worldSize; ++r)
    if (absl::Status s = sendString(ranks[size_t(r)].fd(), bytes, deadline,
                                    absl::StrCat("sending to rank ", r));
        !s.ok())
      return s;
  for (int64_t r = 1; r < c.worldSize; ++r) {
    uint8_t ack = 0;
    if (absl::Status s =
            recvValue(ranks[size_t(r)].fd(), ack, deadline,
                      absl::StrCat("waiting for rank ", r, " to confirm"));
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status join(const RendezvousConfig &c, const std::string &tag,
                  std::string &bytes, Clock::time_point deadline) {
  const std::string what =
      absl::StrCat("rank ", c.rank, " joining rank 0 at ", address(c));
  Socket s;
  std::string failure;
  // Rank 0 may not be listening yet: try again until the deadline.
  while (s.fd() < 0) {
    absl::StatusOr<addrinfo *> found = resolve(c, /*passive=*/false);
    if (!found.ok())
      return found.status();
    for (addrinfo *a = *found; a && s.fd() < 0; a = a->ai_next) {
      Socket attempt(socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (attempt.fd() >= 0 &&
          connect(attempt.fd(), a->ai_addr, a->ai_addrlen) == 0)
        s = std::move(attempt);
      else
        failure = errnoText();
    }
    freeaddrinfo(*found);
    if (s.fd() >= 0)
      break;
    if (msLeft(deadline) == 0)
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not reached (", failure,
                       "); is rank 0 running, and MASTER_ADDR and "
                       "MASTER_PORT the same on every rank?"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  absl::Status st = sendAll(s.fd(), kMagic, 4, deadline, what);
  if (st.ok())
    st = sendString(s.fd(), tag, deadline, what);
  if (st.ok())
    st = sendValue(s.fd(), c.rank, deadline, what);
  if (st.ok())
    st = sendValue(s.fd(), c.worldSize, deadline, what);
  uint8_t status = 0;
  if (st.ok())
    st = recvValue(s.fd(), status, deadline, what);
  if (!st.ok())
    return st;
  if (status != 0) {
    std::string why;
    (void)recvString(s.fd(), why, 4096, deadline, what);
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": refused: ", why));
  }
  if (absl::Status r = recvString(s.fd(), bytes, uint64_t(1) << 30, deadline,
                                  absl::StrCat(what, " (waiting for the "
                                                     "other ranks)"));
      !r.ok())
    return r;
  return sendValue(s.fd(), uint8_t(1), deadline, what);
}

/// The first of `names` that is set, and which.
const char *firstSet(const std::vector<const char *> &names,
                     const char **which) {
  for (const char *name : names)
    if (const char *v = std::getenv(name)) {
      *which = name;
      return v;
    }
  return nullptr;
}

absl::StatusOr<int64_t> integer(const char *name, const char *value,
                                int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi)
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is not an integer in [", lo, ", ",
                     hi, "]"));
  return v;
}

} // namespace

absl::StatusOr<RendezvousConfig> RendezvousFromEnvironment() {
  RendezvousConfig c;
  // srun's variables come last: a launcher's own (mpirun's, or PMI's under
  // srun --mpi=pmi2) say the same where srun set both, and in a job that
  // mpirun started inside a Slurm allocation the SLURM_* ones a rank
  // inherits are its node's, not its own.
  const bool slurm = InSlurmStep();
  std::vector<const char *> rankNames = {"RANK", "OMPI_COMM_WORLD_RANK",
                                         "PMI_RANK"},
                            sizeNames = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                         "PMI_SIZE"},
                            localNames = {"LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "MPI_LOCALRANKID"};
  if (slurm) {
    rankNames.push_back("SLURM_PROCID");
    sizeNames.push_back("SLURM_NTASKS");
    localNames.push_back("SLURM_LOCALID");
  }
  const char *rankName = nullptr, *sizeName = nullptr;
  const char *rank = firstSet(rankNames, &rankName);
  const char *size = firstSet(sizeNames, &sizeName);
  if (!rank || !size)
    return absl::FailedPreconditionError(absl::StrCat(
        "the ranks of a job without MPI meet through RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT (as torchrun sets them), or as tasks "
        "of srun (SLURM_PROCID, SLURM_NTASKS): ",
        !rank ? "RANK" : "WORLD_SIZE", " is not set"));
  absl::StatusOr<int64_t> worldSize = integer(sizeName, size, 1, 1 << 24);
  if (!worldSize.ok())
    return worldSize.status();
  absl::StatusOr<int64_t> r = integer(rankName, rank, 0, *worldSize - 1);
  if (!r.ok())
    return r.status();
  c.rank = *r;
  c.worldSize = *worldSize;
  const char *localName = nullptr;
  if (const char *local = firstSet(localNames, &localName)) {
    absl::StatusOr<int64_t> l = integer(localName, local, 0, *worldSize - 1);
    if (!l.ok())
      return l.status();
    c.localRank = *l;
  }
  if (const char *host = std::getenv("MASTER_ADDR"); host && *host) {
    c.host = host;
  } else if (std::strcmp(rankName, "SLURM_PROCID") == 0) {
    // srun puts task 0 on the first node of its step (in its block and
    // cyclic distributions; an arbitrary one sets MASTER_ADDR).
    const char *listName = nullptr;
    if (const char *list =
            firstSet({"SLURM_STEP_NODELIST", "SLURM_NODELIST"}, &listName)) {
      absl::StatusOr<std::vector<std::string>> hosts =
          ExpandSlurmHostlist(list);
      if (!hosts.ok())
        return absl::InvalidArgumentError(
            absl::StrCat(listName, ": ", hosts.status().message()));
      c.host = hosts->front();
    }
  }
  if (const char *port = std::getenv("MASTER_PORT")) {
    absl::StatusOr<int64_t> p = integer("MASTER_PORT", port, 1, 65535);
    if (!p.ok())
      return p.status();
    c.port = int(*p);
  }
  if (const char *t = std::getenv("BRAID_RENDEZVOUS_TIMEOUT")) {
    double seconds = 0;
    if (!absl::SimpleAtod(t, &seconds) || !(seconds > 0))
      return absl::InvalidArgumentError(
          absl::StrCat("BRAID_RENDEZVOUS_TIMEOUT='", t,
                       "' is not a positive number of seconds"));
    c.timeoutSeconds = seconds;
  }
  return c;
}

absl::Status RendezvousBroadcast(const RendezvousConfig &config,
                                 const std::string &tag, std::string &bytes) {
  if (config.worldSize <= 1)
    return absl::OkStatus();
  Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(
                         int64_t(std::min(config.timeoutSeconds, 1e9) * 1e3));
  if (config.rank == 0)
    return serve(config, tag, bytes, deadline);
  return join(config, tag, bytes, deadline);
}

} // namespace braid::comm
