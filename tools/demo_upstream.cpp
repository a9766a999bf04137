// The demo upstream of the quick start: the integration tests' upstream on a fixed port, so
// a newcomer has an API behind ratewall without installing anything else.
// usage: ratewall-demo-upstream [PORT]   (default 8000, 127.0.0.1 only)

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "support/test_upstream.hpp"

int main(int argc, char** argv) {
  int port = argc > 1 ? std::atoi(argv[1]) : 8000;
  if (port <= 0 || port > 65535) {
    std::fprintf(stderr, "usage: ratewall-demo-upstream [PORT]\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the server thread starts: it inherits it
  ratewall::testing::test_upstream upstream(static_cast<std::uint16_t>(port));
  std::fprintf(stderr, "demo upstream on 127.0.0.1:%u (echoes each request as JSON)\n",
               upstream.port());
  int sig = 0;
  sigwait(&set, &sig);
  upstream.stop();
  return 0;
}
