// Raw loopback sockets for tests that need what Client does not do: bytes sent exactly as
// given, a client that leaves mid-request, one that never reads. Header-only; tests only.
//
//   int fd = http::testing::ConnectLoopback(server->port());
//   ASSERT_TRUE(http::testing::WriteAll(fd, http::testing::PostText("/v1/completions", body)));
//   ::close(fd);  // the client leaves before the answer
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace aicloud::http::testing {

// A socket connected to 127.0.0.1:port, reads timing out after 5 s; -1 when it cannot connect.
inline int ConnectLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Writes all of `bytes`; false when the socket refuses part of them.
inline bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// "POST <target> HTTP/1.1" with a JSON body, Content-Length and any extra header lines
// ("Name: value\r\n" each).
inline std::string PostText(std::string_view target, std::string_view body, std::string_view extra_headers = {}) {
  std::string out = "POST ";
  out.append(target).append(" HTTP/1.1\r\nHost: x\r\n").append(extra_headers);
  out.append("Content-Type: application/json\r\nContent-Length: ").append(std::to_string(body.size()));
  out.append("\r\n\r\n").append(body);
  return out;
}

}  // namespace aicloud::http::testing
