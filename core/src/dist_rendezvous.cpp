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
#include <future>
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

// MASTER_ADDR's addresses (port MASTER_PORT); nullptr where they cannot be had now, `why` saying
// why. A name that does not resolve may yet (a cluster's name for the master, made as it starts):
// tried again until the deadline.
Addresses resolve(const Env& env, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &found);
  if (rc != 0) why = gai_strerror(rc);
  return Addresses(rc == 0 ? found : nullptr, [](addrinfo* a) {
    if (a) ::freeaddrinfo(a);
  });
}

// Whether one of `found` is an address of this machine (one a socket can be bound to).
bool is_local(const addrinfo* found) {
  for (const addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage any{};
    std::memcpy(&any, a->ai_addr, a->ai_addrlen);
    if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any)->sin_port = 0;
    if (any.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&any)->sin6_port = 0;
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&any), a->ai_addrlen) == 0 || errno != EADDRNOTAVAIL;
    ::close(fd);
    if (bound) return true;
  }
  return false;
}

// Whether something accepts TCP connections at one of `found` (each tried for at most a second).
// The store's own connect is only tried once this says yes: tried again and again it fails at
// once, each time with a line of c10d's on stderr, and tried once for the whole timeout Ctrl-C
// cannot end it.
bool accepts_connections(const addrinfo* found) {
  bool ok = false;
  for (const addrinfo* a = found; a && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = ::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
  }
  return ok;
}

const std::string kSize = "world_size", kJoined = "joined", kOutcome = "outcome", kGo = "go";
std::string rank_key(int r) { return "rank/" + std::to_string(r); }
std::string done_key(int r) { return "done/" + std::to_string(r); }
}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous_store(const Env& env) {
  const double secs = env.timeout.count() / 1000.0;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const bool serve = env.rank == 0 && !env.agent_store;
  // One deadline for the whole rendezvous, waited for in slices of at most a second: Ctrl-C ends
  // it at once, and a worker refused (another WORLD_SIZE, a RANK taken) ends every worker's.
  const auto deadline = Clock::now() + env.timeout;
  const auto check_interrupt = [&] {
    TT_CHECK_AS(Interrupted, !interrupt_requested(), "interrupted during the distributed rendezvous at ", where,
                ": nothing was trained");
  };
  log().info("distributed: rank {} of {} {} {} (up to TT_DIST_TIMEOUT = {} s)", env.rank, env.world_size,
             serve ? "waiting for the other workers at" : "joining the master at", where, secs);
  const std::string check = detail::cat("Check MASTER_ADDR/MASTER_PORT (the master must be reachable and the port "
                                        "free), that all ", env.world_size, " workers were started, or raise TT_DIST_TIMEOUT");
  // MASTER_ADDR resolved (and, to connect to, accepting connections), tried again until the deadline.
  for (bool ready = false; !ready; std::this_thread::sleep_for(std::chrono::milliseconds(200))) {
    std::string why = "nothing accepted connections there";
    const Addresses found = resolve(env, why);
    if (found && serve && !is_local(found.get()))
      log().warn("distributed rendezvous: MASTER_ADDR='{}' is not an address of this machine, where rank 0 serves the "
                 "workers (on every address, port {}): if they cannot reach it, set MASTER_ADDR to one of this "
                 "machine's addresses (127.0.0.1 for workers on one machine) for every worker", env.master_addr,
                 env.master_port);
    ready = found && (serve || accepts_connections(found.get()));
    TT_CHECK_AS(ConfigError, found || Clock::now() < deadline, "distributed rendezvous: MASTER_ADDR='",
                env.master_addr, "' did not resolve within ", secs, " s (", why, "): set MASTER_ADDR to rank 0's machine, "
                "e.g. 127.0.0.1 for workers on one machine");
    TT_CHECK_AS(DistError, ready || Clock::now() < deadline, "distributed rendezvous: rank ", env.rank, " of ",
                env.world_size, " could not reach the master at ", where, " within ", secs, " s (", why, "). ", check);
    check_interrupt();
  }
  // The store made, and its first request answered, on a thread of its own, waited for with a
  // bound: c10d's connect and requests have no timeout of their own on every LibTorch (another
  // program on MASTER_PORT that accepts and never answers hung a worker forever), and Ctrl-C
  // cannot end them. A thread given up on is left to the process's end.
  const std::string prefix = env.launch_id.empty() ? "tt" : "tt/" + env.launch_id;
  const auto bound = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                                std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
  auto made = std::make_shared<std::promise<c10::intrusive_ptr<c10d::Store>>>();
  auto coming = made->get_future();
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = serve;
  so.numWorkers = env.world_size;
  so.waitWorkers = false;  // the check-in below waits for them
  so.timeout = bound;
  std::thread([made, so, env, prefix] {
    try {
      c10::intrusive_ptr<c10d::Store> tcp = compat::make_tcp_store(env.master_addr, so);
      auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
      // rank 0 says its WORLD_SIZE as soon as it serves; a check is a request a store answers at
      // once (rank 0 may come later than the others to torchrun's agent's store)
      if (env.rank == 0) store->set(kSize, store_value(std::to_string(env.world_size)));
      store->check({kSize});
      made->set_value(store);
    } catch (...) {
      made->set_exception(std::current_exception());
    }
  }).detach();
  const auto given_up = Clock::now() + bound + std::chrono::seconds(2);
  while (coming.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    check_interrupt();
    TT_CHECK_AS(ConfigError, Clock::now() < given_up, "distributed rendezvous: rank ", env.rank, " reached ", where,
                " but nothing there answered as a store within ",
                fmt::format("{:.1f}", bound.count() / 1000.0), " s: ", serve ? "set MASTER_ADDR to an address of this "
                "machine" : "another program may listen on MASTER_PORT; choose a free port for every worker");
  }
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = coming.get();
    store->setTimeout(env.timeout);
  } catch (const std::exception& e) {
    check_interrupt();
    std::string what = e.what();
    what = first_line(what);
    TT_CHECK_AS(ConfigError, !serve || (what.find("Address already in use") == std::string::npos &&
                                        !port_in_use(env.master_port)),
                "distributed rendezvous: rank 0 could not serve the workers at ", where, ": port ", env.master_port,
                " is in use (", what, "). Choose another MASTER_PORT, a free TCP port, and give every worker the "
                "same (or stop the other rank 0 that serves it)");
    TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " of ", env.world_size, " could not ",
               serve ? "serve the workers at " : "reach the master at ", where, " (", what, "). ", check);
  }
  // The check-in. A worker claims its RANK, compares rank 0's WORLD_SIZE with its own, then counts
  // itself in. One outcome is decided once, by the first to write it (compareSet): "go", by a
  // worker that sees all WORLD_SIZE counted in, or a refusal (another WORLD_SIZE, a RANK taken),
  // by the worker refused. Every worker reads it: all start, or all stop saying why.
  std::string refusal;  // this worker's
  bool claimed = false, seen_size = env.rank == 0, counted = false;
  int64_t joined = 0;
  std::string outcome;
  const auto decide = [&](const std::string& mine) {
    return store_text(store->compareSet(kOutcome, {}, store_value(mine)));
  };
  try {
    claimed = store->add(rank_key(env.rank), 1) == 1;
    if (!claimed)
      refusal = detail::cat("two workers have RANK=", env.rank, ": give each of the ", env.world_size,
                            " workers its own RANK, 0 to ", env.world_size - 1,
                            " (or another run uses this MASTER_ADDR:MASTER_PORT: give this one another)");
    while (outcome.empty()) {
      if (store->check({kOutcome})) {
        outcome = store_text(store->get(kOutcome));
        break;
      }
      if (refusal.empty() && !seen_size && store->check({kSize})) {
        const std::string size0 = store_text(store->get(kSize));
        seen_size = true;
        if (size0 != std::to_string(env.world_size))
          refusal = detail::cat("rank ", env.rank, " has WORLD_SIZE=", env.world_size, ", rank 0 WORLD_SIZE=", size0,
                                ": start every worker with the same WORLD_SIZE");
      }
      if (!refusal.empty()) {
        outcome = decide(refusal);
        break;
      }
      if (seen_size && !counted) counted = (store->add(kJoined, 1), true);
      if (counted && (joined = store->add(kJoined, 0)) >= env.world_size) {
        outcome = decide(kGo);
        break;
      }
      if (Clock::now() >= deadline) break;
      check_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    check_interrupt();
    std::string what = e.what();
    TT_FAIL_AS(DistError, "distributed rendezvous: rank ", env.rank, " lost the master at ", where, " (",
               first_line(what), "): did rank 0 exit?");
  }
  if (outcome == kGo && counted) return store;
  // Refused: each worker that read why says it is done with the store (rank 0, which serves it,
  // waits for those), so that none loses it while reading.
  if (claimed) leave_store(*store, env);
  TT_CHECK_AS(ConfigError, outcome != kGo, "distributed rendezvous: ", refusal.empty() ? "this worker" : refusal,
              ": the run at ", where, " has started with its ", env.world_size, " workers without it");
  TT_CHECK_AS(ConfigError, outcome.empty(), "distributed rendezvous", outcome == refusal ? ": " : " refused: ", outcome,
              outcome == refusal ? "" : detail::cat(" (this is rank ", env.rank, ")"));
  TT_FAIL_AS(DistError, "distributed rendezvous: ", joined, " of ", env.world_size, " workers joined at ", where,
             " within ", secs, " s (TT_DIST_TIMEOUT): start all ", env.world_size, " (RANK 0 to ", env.world_size - 1,
             ", the same MASTER_ADDR and MASTER_PORT), or raise TT_DIST_TIMEOUT");
}

void leave_store(c10d::Store& store, const Env& env) {
  // Each rank that claimed its RANK says it is done; rank 0 waits for those of the others that
  // claimed theirs (at most 10 s, 2 s after an interrupt), then its store may go.
  try {
    store.set(done_key(env.rank), store_value("1"));
    const auto until = Clock::now() + (interrupt_requested() ? std::chrono::milliseconds(2000)
                                                             : std::min<std::chrono::milliseconds>(
                                                                   env.timeout, std::chrono::seconds(10)));
    for (int r = 1; env.rank == 0 && r < env.world_size && Clock::now() < until;)
      if (!store.check({rank_key(r)}) || store.check({done_key(r)})) ++r;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const std::exception&) {  // rank 0 gone: there is nothing to wait for
  }
}

}  // namespace tt::dist
