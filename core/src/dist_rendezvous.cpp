// The rendezvous of a data-parallel run over c10d's TCPStore (tt/dist.h): rank 0 serves the
// store, every rank connects and checks in; a worker with another WORLD_SIZE than rank 0's or a
// RANK already taken is refused, and every other worker hears why at once. At the end each rank
// says it is done with the store, and rank 0 waits for them before the store goes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "dist_compat.h"
#include "tt/dist.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/runtime.h"

using Clock = std::chrono::steady_clock;

namespace tt::dist {

namespace {
std::vector<uint8_t> value_of(const std::string& s) { return {s.begin(), s.end()}; }

// Whether another process listens on TCP `port` (a bind to it, as the store's, is refused).
bool port_in_use(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool in_use = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

using Addresses = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;

// MASTER_ADDR's addresses (port MASTER_PORT); nullptr where the resolver did not answer now (tried
// again; `why` says so). A name that does not resolve is refused at once (ConfigError naming MASTER_ADDR).
Addresses resolve(const Env& env, std::string* why = nullptr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &found);
  TT_CHECK_AS(ConfigError, rc != EAI_NONAME, "distributed rendezvous: MASTER_ADDR='", env.master_addr,
              "' is not a host name or address this machine can resolve (", gai_strerror(rc),
              "): set MASTER_ADDR to rank 0's machine, e.g. 127.0.0.1 for workers on one machine");
  if (rc != 0 && why) *why = detail::cat("the resolver did not resolve MASTER_ADDR='", env.master_addr, "': ", gai_strerror(rc));
  return Addresses(rc == 0 ? found : nullptr, [](addrinfo* a) {
    if (a) ::freeaddrinfo(a);
  });
}

// Rank 0 serves the store at MASTER_ADDR and its own client reaches it there: an address of
// another machine is refused (it failed later, in ways that named neither MASTER_ADDR nor the fix).
void check_local(const Env& env) {
  const Addresses found = resolve(env);
  bool local = !found;  // not known now: left to the store
  for (const addrinfo* a = found.get(); a && !local; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage any{};
    std::memcpy(&any, a->ai_addr, a->ai_addrlen);
    if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any)->sin_port = 0;
    if (any.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&any)->sin6_port = 0;
    local = ::bind(fd, reinterpret_cast<sockaddr*>(&any), a->ai_addrlen) == 0 || errno != EADDRNOTAVAIL;
    ::close(fd);
  }
  TT_CHECK_AS(ConfigError, local, "distributed rendezvous: rank 0 serves the workers at MASTER_ADDR='", env.master_addr,
              "', which is not an address of this machine: start rank 0 on that machine, or set MASTER_ADDR to one "
              "of this machine's addresses (127.0.0.1 for workers on one machine) for every worker");
}

// Whether something accepts TCP connections at MASTER_ADDR:MASTER_PORT (tried for at most
// 200 ms). The store's own connect is only tried once this says yes: tried again and again it
// fails at once, each time with a line of c10d's on stderr, and tried once for the whole timeout
// Ctrl-C cannot end it. Where MASTER_ADDR did not resolve now, `why` says so.
bool accepts_connections(const Env& env, std::string& why) {
  const Addresses found = resolve(env, &why);
  bool ok = false;
  for (const addrinfo* a = found.get(); a && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = ::poll(&p, 1, 200) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
  }
  return ok;
}
}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous_store(const Env& env) {
  const double secs = env.timeout.count() / 1000.0;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  // One deadline for the whole rendezvous, waited for in slices of at most a second: Ctrl-C ends
  // it at once, and a worker refused (another WORLD_SIZE, a RANK taken) ends every worker's.
  const auto deadline = Clock::now() + env.timeout;
  const auto check_interrupt = [&] {
    TT_CHECK_AS(Interrupted, !interrupt_requested(), "interrupted during the distributed rendezvous at ", where,
                ": nothing was trained");
  };
  log().info("distributed: rank {} of {} {} {} (up to TT_DIST_TIMEOUT = {} s)", env.rank, env.world_size,
             env.rank == 0 ? "waiting for the other workers at" : "joining the master at", where, secs);
  // The store: rank 0 serves it; the others connect once the master accepts connections.
  const std::string check = detail::cat("Check MASTER_ADDR/MASTER_PORT (the master must be reachable and the port "
                                        "free), that all ", env.world_size, " workers were started, or raise TT_DIST_TIMEOUT");
  if (env.rank == 0) check_local(env);
  for (bool up = env.rank == 0; !up; std::this_thread::sleep_for(std::chrono::milliseconds(200))) {
    std::string why = "nothing accepted connections there";
    up = accepts_connections(env, why);
    TT_CHECK_AS(DistError, up || Clock::now() < deadline, "distributed rendezvous: rank ", env.rank, " of ",
                env.world_size, " could not reach the master at ", where, " within ", secs, " s (", why, "). ", check);
    check_interrupt();
  }
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0;
    so.numWorkers = env.world_size;
    so.waitWorkers = false;  // the check-in below waits for them
    so.timeout = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                          std::chrono::milliseconds(1000));
    store = compat::make_tcp_store(env.master_addr, so);
    store->setTimeout(env.timeout);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = first_line(what);
    // failed at once: no timeout helps
    TT_CHECK_AS(DistError, env.rank != 0 || (what.find("Address already in use") == std::string::npos &&
                                             !port_in_use(env.master_port)),
                "distributed rendezvous: rank 0 could not serve the workers at ", where, ": port ", env.master_port,
                " is in use (", what, "). Choose another MASTER_PORT, a free TCP port, and give every worker the "
                "same (or stop the other rank 0 that serves it)");
    TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " of ", env.world_size, " could not ",
               env.rank == 0 ? "serve the workers at " : "reach the master at ", where, " within ", secs, " s (", what,
               "). ", check);
  }
  // Every worker checks in once it has seen rank 0's WORLD_SIZE equal its own and its RANK free;
  // a worker refused says why in the store, where every other one reads it.
  const std::string refused_key = "tt/refused", size_key = "tt/world_size";
  std::string refusal, theirs;  // this rank's reason; another's
  bool seen_size = env.rank == 0, counted = false;
  int64_t joined = 0;
  const auto lost_master = [&](const std::exception& e) {
    std::string what = e.what();
    TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " lost the master at ", where, " (",
               first_line(what), "): did rank 0 exit?");
  };
  if (env.rank != 0) {
    // The first answer, bounded: rank 0 says its WORLD_SIZE as soon as it serves. (A wait also
    // gives the store's connection the receive timeout its other requests lack: a master that
    // stops answering fails them instead of hanging them.)
    const auto bound = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                                  std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
    try {
      store->wait({size_key}, bound);
    } catch (const std::exception& e) {
      std::string what = e.what();
      TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " reached ", where, " but nothing there answered "
                 "as tt's rank 0 within ", fmt::format("{:.1f}", bound.count() / 1000.0), " s (", first_line(what), "): another program may "
                 "listen on MASTER_PORT; choose a free port for every worker");
    }
  }
  try {
    if (env.rank == 0) store->set(size_key, value_of(std::to_string(env.world_size)));
    if (store->add("tt/rank/" + std::to_string(env.rank), 1) > 1)
      refusal = detail::cat("two workers have RANK=", env.rank, ": give each of the ", env.world_size,
                            " workers its own RANK, 0 to ", env.world_size - 1);
  } catch (const std::exception& e) {
    lost_master(e);
  }
  while (refusal.empty() && theirs.empty()) {
    try {
      if (store->check({refused_key})) {
        const auto v = store->get(refused_key);
        theirs.assign(v.begin(), v.end());
        break;
      }
      if (!seen_size && store->check({size_key})) {
        const auto v = store->get(size_key);
        const std::string size0(v.begin(), v.end());
        seen_size = true;
        if (size0 != std::to_string(env.world_size)) {
          refusal = detail::cat("rank ", env.rank, " has WORLD_SIZE=", env.world_size, ", rank 0 WORLD_SIZE=", size0,
                                ": start every worker with the same WORLD_SIZE");
          break;
        }
      }
      if (seen_size && !counted) counted = (store->add("tt/joined", 1), true);
      if (counted) joined = store->add("tt/joined", 0);
    } catch (const std::exception& e) {
      lost_master(e);
    }
    if (joined >= env.world_size || Clock::now() >= deadline) break;
    check_interrupt();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // A refusal: every worker that reads it leaves, rank 0 last (those that come later read it too).
  if (!refusal.empty()) {
    try {
      store->set(refused_key, value_of(refusal));
    } catch (const std::exception&) {  // rank 0 gone: it is not waiting any more
    }
    leave_store(*store, env);
    TT_FAIL_AS(ConfigError, "distributed rendezvous: ", refusal);
  }
  if (!theirs.empty()) {
    leave_store(*store, env);
    TT_FAIL_AS(ConfigError, "distributed rendezvous refused: ", theirs, " (this is rank ", env.rank, ")");
  }
  TT_CHECK_AS(DistError, joined >= env.world_size, "distributed rendezvous: ", joined, " of ", env.world_size,
              " workers joined at ", where, " within ", secs, " s (TT_DIST_TIMEOUT): start all ", env.world_size,
              " (RANK 0 to ", env.world_size - 1, ", the same MASTER_ADDR and MASTER_PORT), or raise TT_DIST_TIMEOUT");
  return store;
}

void leave_store(c10d::Store& store, const Env& env) {
  try {
    store.add("tt/done", 1);
    const auto until = Clock::now() + std::min<std::chrono::milliseconds>(env.timeout, std::chrono::seconds(10));
    while (env.rank == 0 && store.add("tt/done", 0) < env.world_size && Clock::now() < until &&
           !interrupt_requested())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const std::exception&) {  // rank 0 gone: there is nothing to wait for
  }
}

}  // namespace tt::dist
