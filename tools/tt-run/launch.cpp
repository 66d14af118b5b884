#include "launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>

extern char** environ;

#include "tt/dist.h"
#include "tt/error.h"
#include "tt/runtime.h"

namespace tt::launch {

namespace {
// The first signal and how many came: two Ctrl-Cs within one turn of the loop are two. A second
// signal within 100 ms of the first where one of the two came from the parent process is a copy
// of it: timeout(1) signals the process, then at once its group. A parent's second signal later
// than that (a batch system's, or a script's, as a second Ctrl-C) is a second.
volatile std::sig_atomic_t g_signal = 0, g_signal_count = 0, g_first_from_parent = 0;
timespec g_first_at{};  // clock_gettime is async-signal-safe
void on_signal(int sig, siginfo_t* info, void*) {
  const bool from_parent =
      info && (info->si_code == SI_USER || info->si_code == SI_QUEUE) && info->si_pid == ::getppid();
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_signal_count > 0 && (from_parent || g_first_from_parent)) {
    const double since = static_cast<double>(now.tv_sec - g_first_at.tv_sec) +
                         1e-9 * static_cast<double>(now.tv_nsec - g_first_at.tv_nsec);
    if (since < 0.1) return;
  }
  if (g_signal_count == 0) {
    g_signal = sig;
    g_first_from_parent = from_parent;
    g_first_at = now;
  }
  g_signal_count = g_signal_count + 1;
}

// A port the kernel says is free now (bound to 0, then released). The master binds it
// again moments later; TCPStore sets SO_REUSEADDR, so TIME_WAIT does not get in the way.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  TT_CHECK(fd >= 0, "tt-run --nproc: cannot open a socket to find a free port: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);  // as the master's store binds it: free there too
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  TT_CHECK(ok, "tt-run --nproc: cannot find a free port on 127.0.0.1: ", std::strerror(err));
  return ntohs(a.sin_port);
}

// A worker's stdout or stderr, read by the launcher and written to its own with "[rank R] "
// before each line, so that the ranks' duplicated warnings can be told apart (rank 0's go to the
// terminal directly, unchanged).
struct Labelled {
  int fd = -1;          // the pipe's read end; -1 once it is closed
  int to = 1;           // 1 or 2
  int rank = 0;
  std::string prefix;   // "[rank R] "
  std::string partial;  // the line read so far
  static constexpr size_t kMaxLine = 64 * 1024;
  void write_all(const std::string& text) const {
    for (size_t at = 0; at < text.size();) {
      const ssize_t n = ::write(to, text.data() + at, text.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  // Reads what is there, up to 64 KiB (a worker that writes without pause does not hold up the
  // others or the launcher's signals); writes the complete lines, and a line longer than kMaxLine
  // as lines of kMaxLine, each labelled (so that no other rank's line lands inside one). At the
  // end of the stream, the rest too. Returns whether more may be waiting.
  bool pump() {
    char buf[4096];
    for (int reads = 0; reads < 16;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;  // EAGAIN: nothing more now
      ++reads;
      if (n == 0) {
        if (!partial.empty()) write_all(prefix + partial + "\n");
        partial.clear();
        ::close(fd);
        fd = -1;
        return false;
      }
      const size_t scanned = partial.size();  // holds no newline: only what came is searched
      partial.append(buf, static_cast<size_t>(n));
      std::string out;
      size_t start = 0;
      for (size_t nl; (nl = partial.find('\n', std::max(start, scanned))) != std::string::npos; start = nl + 1)
        out += (nl == start ? "" : prefix) + partial.substr(start, nl + 1 - start);  // an empty line stays empty
      partial.erase(0, start);
      // (a line of exactly kMaxLine waits for its newline: split there, it left an empty line after it)
      for (; partial.size() > kMaxLine; partial.erase(0, kMaxLine)) out += prefix + partial.substr(0, kMaxLine) + "\n";
      if (!out.empty()) write_all(out);
    }
    return true;
  }
};

// Waits up to `ms` for output of the workers; passes on what came.
void pump_output(std::vector<Labelled>& streams, int ms) {
  std::vector<pollfd> fds;
  std::vector<Labelled*> of;
  for (auto& l : streams)
    if (l.fd >= 0) {
      fds.push_back({l.fd, POLLIN, 0});
      of.push_back(&l);
    }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return;
  }
  if (::poll(fds.data(), fds.size(), ms) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents != 0) of[i]->pump();
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}
}  // namespace

std::optional<int> take_nproc(std::vector<std::string>& args) {
  std::optional<int> n;
  const auto malformed = [] {
    return ConfigError("--nproc takes the number of worker processes, e.g. --nproc 2");
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    size_t drop = 0;
    if (args[i] == "--nproc") {
      if (i + 1 >= args.size()) throw malformed();
      value = args[i + 1];
      drop = 2;
    } else if (args[i].rfind("--nproc=", 0) == 0) {
      value = args[i].substr(8);
      drop = 1;
    } else {
      continue;
    }
    char* end = nullptr;
    long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < -1000000 || v > 1000000) throw malformed();
    n = static_cast<int>(v);
    args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i + drop));
    --i;
  }
  return n;
}

int run(const Options& o) {
  TT_CHECK_AS(ConfigError, o.nproc >= 1, "--nproc ", o.nproc, ": the number of worker processes must be at least 1");
  // One machine, as torchrun --standalone: loopback and a port free now, whatever MASTER_ADDR and
  // MASTER_PORT a cluster shell exports (they named another host, or a port in use).
  const std::string addr = "127.0.0.1";
  const std::string port = std::to_string(free_port());

  // The workers share this machine's cores, as torchrun's do: each takes cores / N threads
  // (trainer.threads 0 reads OMP_NUM_THREADS) unless the user has set OMP_NUM_THREADS.
  // A malformed value is refused here, once, rather than by every worker; a blank one is unset.
  const std::string worker_threads = threads_from_environment() > 0
                                         ? std::string(std::getenv("OMP_NUM_THREADS"))
                                         : std::to_string(std::max(1, usable_cores() / o.nproc));

  // Each worker's environment and arguments, made before fork: the child only execs.
  std::vector<std::vector<std::string>> envs(o.nproc);
  for (int r = 0; r < o.nproc; ++r) {
    const std::vector<std::pair<std::string, std::string>> set = {
        {"RANK", std::to_string(r)},          {"LOCAL_RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(o.nproc)}, {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
        {"MASTER_ADDR", addr},                {"MASTER_PORT", port},
        {"OMP_NUM_THREADS", worker_threads}};
    for (char** e = environ; e && *e; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      if (std::none_of(set.begin(), set.end(), [&](const auto& p) { return p.first == name; })) envs[r].push_back(kv);
    }
    for (const auto& [k, v] : set) envs[r].push_back(k + "=" + v);
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(o.tt_run.c_str()));
  for (const auto& a : o.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::vector<char*>> envps(o.nproc);
  for (int r = 0; r < o.nproc; ++r) {
    for (auto& kv : envs[r]) envps[r].push_back(kv.data());
    envps[r].push_back(nullptr);
  }
  const std::string cannot_run = "tt-run --nproc: cannot run " + o.tt_run + "\n";

  g_signal = g_signal_count = g_first_from_parent = 0;
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);  // one handler at a time, whichever of the two signals came
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A pipe whose reader is gone (tt-run ... | head) is an error to ignore, not the launcher's
  // end: it goes on supervising; the workers inherit the setting (their writes fail, they run on).
  signal(SIGPIPE, SIG_IGN);
  if (tt::interrupt_requested()) {  // a Ctrl-C in the launcher's checks, before this handler: the first
    g_signal = SIGINT;
    g_signal_count = 1;
    tt::clear_interrupt();
  }

  std::vector<pid_t> pids(o.nproc, -1);
  std::vector<bool> alive(o.nproc, false);
  const pid_t parent = getpid();
  std::vector<Labelled> streams;  // ranks 1 and up: their stdout and stderr
  for (int r = 0; r < o.nproc; ++r) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (r > 0 && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
      for (int fd : {out[0], out[1]})
        if (fd >= 0) ::close(fd);
      out[0] = out[1] = err[0] = err[1] = -1;  // no pipes: its lines go out unlabelled
    }
    pid_t pid = fork();
    if (pid < 0) {  // the workers started so far are stopped (they wait for the others) and reaped
      const int why = errno;
      for (int q = 0; q < r; ++q) kill(pids[q], SIGKILL);
      for (int q = 0; q < r; ++q) waitpid(pids[q], nullptr, 0);
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) ::close(fd);
      for (auto& l : streams)
        if (l.fd >= 0) ::close(l.fd);
      TT_FAIL("tt-run --nproc: fork failed for rank ", r, ": ", std::strerror(why));
    }
    if (pid == 0) {
      // Its own process group: a Ctrl-C at the terminal reaches the launcher only, which
      // passes the first on and answers a second with SIGKILL.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher gone: the workers go too
      if (getppid() != parent) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (out[1] >= 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
      }
      execve(o.tt_run.c_str(), argv.data(), envps[r].data());
      (void)!::write(2, cannot_run.data(), cannot_run.size());
      _exit(127);
    }
    pids[r] = pid;
    alive[r] = true;
    if (out[0] >= 0) {
      const std::string prefix = "[rank " + std::to_string(r) + "] ";
      for (auto [rd, wr, to] : {std::tuple{out[0], out[1], 1}, std::tuple{err[0], err[1], 2}}) {
        ::close(wr);
        ::fcntl(rd, F_SETFL, ::fcntl(rd, F_GETFL) | O_NONBLOCK);
        Labelled l;
        l.fd = rd;
        l.to = to;
        l.rank = r;
        l.prefix = prefix;
        streams.push_back(std::move(l));
      }
    }
  }

  int remaining = o.nproc, exit_code = 0, signals_received = 0;
  // A rank that fails first with a plain error (1), a lost peer (8) or a signal is often failing
  // because another stopped; a rank that says why (tt's exit codes 2-7: a refused pipeline or
  // directory, a failed write, ...) gives the launcher's exit code instead.
  bool generic_first = false;
  bool stopping = false, terminated = false;
  int ended_by_signal = 0;  // workers the interrupt ended before they could say so themselves
  std::chrono::steady_clock::time_point term_at{}, kill_at{};
  auto signal_all = [&](int sig) {
    for (int r = 0; r < o.nproc; ++r)
      if (alive[r]) kill(pids[r], sig);
  };
  // SIGTERM with a value that tells the workers why (tt/dist.h): another one failed.
  auto stop_all = [&] {
    sigval v{};
    v.sival_int = tt::dist::kStopAfterWorkerFailed;
    for (int r = 0; r < o.nproc; ++r)
      if (alive[r]) sigqueue(pids[r], SIGTERM, v);
  };
  while (remaining > 0) {
    if (g_signal_count > signals_received) {
      // The first Ctrl-C / SIGTERM is passed on (each worker checkpoints and stops); a second one
      // aborts at once, as it does a run alone (a worker takes its parent's second signal for a
      // copy of the first: tt/runtime.h).
      if (signals_received == 0) signal_all(g_signal);
      signals_received = g_signal_count;
      if (signals_received > 1) signal_all(SIGKILL);
    }
    if (stopping && !terminated && std::chrono::steady_clock::now() >= term_at) {
      terminated = true;
      stop_all();
    }
    if (stopping && std::chrono::steady_clock::now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      pump_output(streams, 50);
      continue;
    }
    if (pid < 0) break;
    int r = 0;
    while (r < o.nproc && pids[r] != pid) ++r;
    if (r == o.nproc) continue;
    alive[r] = false;
    --remaining;
    for (auto& l : streams)  // its last lines before what the launcher says of it (a few MiB at most)
      for (int k = 0; l.rank == r && l.fd >= 0 && k < 64 && l.pump(); ++k) {
      }
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    // Interrupted: the launcher passed a Ctrl-C / SIGTERM on (each worker writes its checkpoint
    // and exits 130) or killed the workers at a second one. Nothing failed: tt-run exits 130,
    // as a run alone does, unless a worker gave another reason.
    // (a worker the first signal reached before its handlers were installed died of it)
    if (signals_received > 0 && failed &&
        (code == 130 || (WIFSIGNALED(status) && (signals_received > 1 || WTERMSIG(status) == g_signal)))) {
      if (exit_code == 0) exit_code = 130;
      if (WIFSIGNALED(status) && signals_received == 1 && WTERMSIG(status) == g_signal) ++ended_by_signal;
      continue;
    }
    const bool generic = code == 1 || code == 8;
    if (failed && exit_code != 0 && generic_first && !generic && code != 130 && WIFEXITED(status)) {
      std::fprintf(stderr, "tt-run --nproc: rank %d (pid %d) %s; tt-run exits with its status\n", r,
                   static_cast<int>(pid), describe(status).c_str());
      exit_code = code;
      generic_first = false;
    }
    if (failed && exit_code == 0) {
      exit_code = code;
      generic_first = generic;
      // (an interrupt sent to one worker stops every worker: the one that ends first is not its target)
      const std::string how = code == 130 && WIFEXITED(status)
                                  ? "ended on an interrupt (status 130; one sent to any worker stops them all)"
                                  : describe(status);
      if (remaining > 0 && !stopping) {
        std::fprintf(stderr, "tt-run --nproc: rank %d (pid %d) %s; stopping the other %d worker(s)\n", r,
                     static_cast<int>(pid), how.c_str(), remaining);
        // A second first for those stopping by themselves (a refusal rank 0 passed on, a peer
        // seen gone), then SIGTERM; SIGKILL after the grace.
        stopping = true;
        term_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        kill_at = term_at + std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
      } else if (remaining == 0 && o.nproc > 1 && exit_code != 130) {
        std::fprintf(stderr, "tt-run --nproc: rank %d (pid %d) %s\n", r, static_cast<int>(pid), how.c_str());
      }
    }
  }
  if (ended_by_signal > 0)
    std::fprintf(stderr, "tt-run --nproc: interrupted; %d of the %d workers ended before they were set up (nothing "
                 "was trained)\n", ended_by_signal, o.nproc);
  // The workers' last lines; a process they started that still holds a pipe gets a second.
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::any_of(streams.begin(), streams.end(), [](const Labelled& l) { return l.fd >= 0; }) &&
         std::chrono::steady_clock::now() < drain_until)
    pump_output(streams, 50);
  for (auto& l : streams)
    if (l.fd >= 0) {
      if (!l.partial.empty()) l.write_all(l.prefix + l.partial + "\n");
      ::close(l.fd);
    }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  return exit_code;
}

}  // namespace tt::launch
