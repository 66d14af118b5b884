#include "disk_offload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "tt/compat.h"
#include "tt/error.h"
#include "tt/optimizer_state.h"

namespace tt::offload {

namespace {
constexpr int64_t kPage = 4096;
int64_t round_up(int64_t n) { return (n + kPage - 1) / kPage * kPage; }
std::string sys_error() { return std::strerror(errno); }
}  // namespace

MappedFile::MappedFile(std::filesystem::path path, int64_t capacity, bool keep)
    : path_(std::move(path)), capacity_(round_up(std::max<int64_t>(capacity, kPage))), keep_(keep) {
  std::error_code ec;
  if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path(), ec);
  TT_CHECK_AS(ConfigError, !ec, "offload: cannot create the folder of the state file ", path_.string(), ": ",
              ec.message(), " (set plugins.offload.path to a writable place)");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  TT_CHECK_AS(ConfigError, fd_ >= 0, "offload: cannot create the state file ", path_.string(), ": ", sys_error(),
              " (set plugins.offload.path to a writable place)");
  if (::ftruncate(fd_, capacity_) != 0) {
    const std::string e = sys_error();
    ::close(fd_);
    TT_FAIL_AS(ConfigError, "offload: cannot size the state file ", path_.string(), " to ", capacity_, " bytes: ", e);
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(capacity_), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    const std::string e = sys_error();
    ::close(fd_);
    TT_FAIL_AS(ConfigError, "offload: cannot map the state file ", path_.string(), ": ", e);
  }
  base_ = static_cast<char*>(m);
}

MappedFile::~MappedFile() {
  if (base_) ::munmap(base_, static_cast<size_t>(capacity_));
  if (fd_ >= 0) ::close(fd_);
  remove_name_unless_kept();
}

void MappedFile::remove_name_unless_kept() {
  if (keep_) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

char* MappedFile::allocate(int64_t bytes) {
  const int64_t n = round_up(bytes);
  TT_CHECK(used_ + n <= capacity_, "offload: the state file ", path_.string(), " is full (", capacity_,
           " bytes): the optimizer holds more state than 12 bytes per parameter");
  char* p = base_ + used_;
  used_ += n;
  return p;
}

void MappedFile::release(const char* p, int64_t bytes) const {
  // Shared file mapping: MADV_DONTNEED unmaps the pages; their contents stay in the file (and
  // the page cache until the kernel writes them out), and the next access faults them back in.
  if (bytes > 0) ::madvise(const_cast<char*>(p), static_cast<size_t>(round_up(bytes)), MADV_DONTNEED);
}

void MappedFile::prefault(char* p, int64_t bytes) const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  if (bytes > 0) ::madvise(p, static_cast<size_t>(round_up(bytes)), MADV_POPULATE_WRITE);
}

namespace {

// The state tensors of `p` in `opt`, each with a way to replace it. torch's Adam and AdamW
// (FusedAdamW is an AdamW) have known state types; other optimizers implement tt::StateTensors.
using Replace = std::function<void(const at::Tensor&)>;
std::vector<std::pair<at::Tensor, Replace>> state_of(torch::optim::Optimizer& opt, const at::Tensor& p) {
  std::vector<std::pair<at::Tensor, Replace>> out;
  if (auto* st = dynamic_cast<tt::StateTensors*>(&opt)) {
    for (at::Tensor* t : st->state_tensors(p)) out.emplace_back(*t, [t](const at::Tensor& n) { *t = n; });
    return out;
  }
  auto& states = opt.state();
  using Key = typename std::decay_t<decltype(states)>::key_type;
  auto it = states.find(compat::optimizer_state_key<Key>(p.unsafeGetTensorImpl()));
  if (it == states.end()) return out;
  auto add = [&](auto* s) {
    out.emplace_back(s->exp_avg(), [s](const at::Tensor& n) { s->exp_avg(n); });
    out.emplace_back(s->exp_avg_sq(), [s](const at::Tensor& n) { s->exp_avg_sq(n); });
    if (s->max_exp_avg_sq().defined())
      out.emplace_back(s->max_exp_avg_sq(), [s](const at::Tensor& n) { s->max_exp_avg_sq(n); });
  };
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) add(s);
  else if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) add(s);
  return out;
}

bool supported(torch::optim::Optimizer& opt) {
  return dynamic_cast<tt::StateTensors*>(&opt) || dynamic_cast<torch::optim::AdamW*>(&opt) ||
         dynamic_cast<torch::optim::Adam*>(&opt);
}

int64_t capacity_for(torch::optim::Optimizer& opt) {
  // At most three float32 tensors per parameter (Adam with amsgrad), page-aligned each.
  int64_t n = 0;
  for (auto& g : opt.param_groups())
    for (const auto& p : g.params()) n += 12 * p.numel() + 3 * kPage;
  return n;
}

}  // namespace

DiskOffload::DiskOffload(std::shared_ptr<torch::optim::Optimizer> inner, const std::filesystem::path& file,
                         bool keep_file)
    : torch::optim::Optimizer(param_groups_of(*inner), inner->defaults().clone()), inner_(std::move(inner)) {
  TT_CHECK_AS(ConfigError, supported(*inner_),
              "offload target disk moves the state of adam, adamw or adam8bit; this pipeline's optimizer "
              "is another (set optimizer: adamw, or drop the offload plugin)");
  for (auto& g : param_groups())
    for (const auto& p : g.params())
      TT_CHECK_AS(ConfigError, p.device().is_cpu(), "offload target disk needs the parameters on the CPU (",
                  p.device().str(), " here): the host target is the one for CUDA training");
  file_ = std::make_unique<MappedFile>(file, capacity_for(*inner_), keep_file);
}

// Adam's and AdamW's state of a parameter, made where the optimizer finds it on its first step:
// step 0 and zero moments (a max of the second moment with amsgrad), as torch's step (and
// FusedAdamW's) would make them in memory. Made in the file, the state never lives in tensor
// memory: made by the first step, it did for that step, which set the run's peak (the topic
// model of configs/compare-topic.yaml: 68.56 MiB that way against 50.59 on every later step).
void DiskOffload::create_in_file(const at::Tensor& p) {
  if (!p.is_contiguous() || !state_of(*inner_, p).empty() || dynamic_cast<tt::StateTensors*>(inner_.get())) return;
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(inner_.get());
  auto* adam = dynamic_cast<torch::optim::Adam*>(inner_.get());
  if (!adamw && !adam) return;
  bool amsgrad = false;
  for (auto& g : inner_->param_groups())
    amsgrad = amsgrad || (adamw ? static_cast<torch::optim::AdamWOptions&>(g.options()).amsgrad()
                                : static_cast<torch::optim::AdamOptions&>(g.options()).amsgrad());
  const int64_t one = round_up(static_cast<int64_t>(p.nbytes())), count = amsgrad ? 3 : 2;
  Region r{file_->allocate(one * count), one * count};
  std::memset(r.begin, 0, static_cast<size_t>(r.bytes));
  auto zeros = [&](int64_t i) { return torch::from_blob(r.begin + i * one, p.sizes(), p.options()); };
  auto fill = [&](auto state) {
    state->step(0);
    state->exp_avg(zeros(0));
    state->exp_avg_sq(zeros(1));
    if (amsgrad) state->max_exp_avg_sq(zeros(2));
    return state;
  };
  auto& states = inner_->state();
  using Key = typename std::decay_t<decltype(states)>::key_type;
  const Key key = compat::optimizer_state_key<Key>(p.unsafeGetTensorImpl());
  if (adamw)
    states[key] = fill(std::make_unique<torch::optim::AdamWParamState>());
  else
    states[key] = fill(std::make_unique<torch::optim::AdamParamState>());
  regions_[p.unsafeGetTensorImpl()] = r;
}

void DiskOffload::move_to_file(const at::Tensor& p) {
  auto tensors = state_of(*inner_, p);
  if (tensors.empty()) return;
  int64_t bytes = 0;
  for (const auto& [t, _] : tensors) bytes += round_up(static_cast<int64_t>(t.nbytes()));
  Region r{file_->allocate(bytes), bytes};
  char* at = r.begin;
  for (auto& [t, replace] : tensors) {
    TT_CHECK(t.device().is_cpu() && t.is_contiguous(), "offload: optimizer state must be contiguous CPU tensors");
    std::memmove(at, t.data_ptr(), t.nbytes());
    replace(torch::from_blob(at, t.sizes(), t.options()));  // a view of the mapping, not owned
    at += round_up(static_cast<int64_t>(t.nbytes()));
  }
  regions_[p.unsafeGetTensorImpl()] = r;
}

torch::Tensor DiskOffload::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  auto& groups = inner_->param_groups();
  TT_CHECK(groups.size() == param_groups().size(), "offload: the wrapped optimizer's parameter groups changed");
  std::vector<std::vector<at::Tensor>> all;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(param_groups()[g].options().get_lr());  // the schedule sets this wrapper's
    all.push_back(groups[g].params());
    groups[g].params().clear();
  }
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = all[g];
  };
  try {
    for (size_t g = 0; g < groups.size(); ++g) {
      for (const auto& p : all[g]) {
        if (!p.grad().defined()) continue;
        groups[g].params() = {p};
        auto known = regions_.find(p.unsafeGetTensorImpl());
        if (known == regions_.end()) {
          create_in_file(p);
          known = regions_.find(p.unsafeGetTensorImpl());
        }
        if (known != regions_.end()) file_->prefault(known->second.begin, known->second.bytes);
        inner_->step();
        groups[g].params().clear();
        auto it = regions_.find(p.unsafeGetTensorImpl());
        if (it == regions_.end()) {
          move_to_file(p);
          it = regions_.find(p.unsafeGetTensorImpl());
        }
        if (it != regions_.end()) file_->release(it->second.begin, it->second.bytes);
      }
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return loss;
}

void DiskOffload::save(torch::serialize::OutputArchive& archive) const {
  inner_->save(archive);  // reads the state through the mapping
  for (const auto& [impl, r] : regions_) file_->release(r.begin, r.bytes);
}

void DiskOffload::relocate_all() {
  regions_.clear();
  file_->reset();
  for (auto& g : inner_->param_groups())
    for (const auto& p : g.params()) {
      move_to_file(p);
      auto it = regions_.find(p.unsafeGetTensorImpl());
      if (it != regions_.end()) file_->release(it->second.begin, it->second.bytes);
    }
}

void DiskOffload::load(torch::serialize::InputArchive& archive) {
  inner_->load(archive);  // into ordinary tensors; then into the file
  relocate_all();
}

}  // namespace tt::offload
