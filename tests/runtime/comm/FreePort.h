//===- FreePort.h - A TCP port for a test's rendezvous ----------*- C++ -*-===//

#ifndef BRAID_TESTS_RUNTIME_COMM_FREEPORT_H
#define BRAID_TESTS_RUNTIME_COMM_FREEPORT_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>

namespace braid::testutil {

/// A TCP port nothing listens on now, below Linux's ephemeral range
/// (32768-60999), so that no socket the kernel numbers (MPI's, in a
/// parallel test run) takes it before rank 0 listens on it.
inline int FreePort() {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port = 20000 + int(rng() % 12768);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    bool free = bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0;
    close(fd);
    if (free)
      return port;
  }
  return 29500;
}

} // namespace braid::testutil

#endif // BRAID_TESTS_RUNTIME_COMM_FREEPORT_H
