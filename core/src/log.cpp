#include "tt/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <deque>
#include <mutex>

#include "log_early.h"

namespace tt {

namespace {
class EarlySink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out(lines_.begin(), lines_.end());
    lines_.clear();
    keeping_ = false;
    return out;
  }
  void resume() {
    std::lock_guard<std::mutex> lock(mutex_);
    keeping_ = true;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!keeping_) return;
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    lines_.emplace_back(line.data(), line.size());
    if (lines_.size() > 1000) lines_.pop_front();
  }
  void flush_() override {}

 private:
  std::deque<std::string> lines_;
  bool keeping_ = true;
};

const std::shared_ptr<EarlySink>& early_sink() {
  static const auto sink = std::make_shared<EarlySink>();
  return sink;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::stderr_color_mt("tt");
  l->set_pattern("[%H:%M:%S] [%^%l%$] %v");  // the console's; the early lines keep log.txt's pattern
  l->sinks().push_back(early_sink());
  if (const char* lvl = std::getenv("TT_LOG_LEVEL")) l->set_level(spdlog::level::from_str(lvl));
  return l;
}
}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

namespace early_log {
std::vector<std::string> take() { return early_sink()->take(); }
void resume() { early_sink()->resume(); }
}  // namespace early_log

}  // namespace tt
