// Extension point 9 of tt/extension.h: saved-tensor pack/unpack hooks for C++ code.
//
// LibTorch asks its default autograd engine for the hooks of every tensor autograd saves
// (SavedVariable's constructor calls Engine::get_default_saved_variable_hooks()); the base
// engine answers none and only Python's engine consults at::SavedTensorDefaultHooks, whose
// hooks are Python callables. tt installs, once and only when a scope is first opened, an
// engine that is LibTorch's own plus an answer from this thread's innermost scope
// (torch::autograd::set_default_engine_stub, the door LibTorch keeps for Python's engine).
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <mutex>
#include <utility>
#include <vector>

#include "tt/error.h"
#include "tt/extension.h"

namespace tt::nn {
namespace {

thread_local std::vector<std::shared_ptr<const SavedTensorPack>> scopes;

// One saved tensor: what the pack function returned, or the tensor itself where it kept it.
class Packed final : public torch::autograd::SavedVariableHooks {
 public:
  explicit Packed(std::shared_ptr<const SavedTensorPack> pack) : pack_(std::move(pack)) {}

  void call_pack_hook(const at::Tensor& saved) override {
    // `saved` may be the output of the node that owns this hook: keeping it (or handing it to
    // a pack function that keeps it) would make a reference cycle through its grad_fn.
    // detach() shares storage and version counter, so unpacking rebuilds the same variable.
    at::Tensor detached = saved.detach();
    // a view of a leaf (weight.t(), which linear layers save) is the leaf's memory too
    const bool leaf = saved.is_leaf() || (saved.is_view() && saved._base().is_leaf());
    unpack_ = (*pack_)(detached, leaf);
    if (!unpack_) kept_ = std::move(detached);
    pack_.reset();
  }

  at::Tensor call_unpack_hook() override {
    if (!unpack_) return kept_;
    at::Tensor t = unpack_();
    TT_CHECK(t.defined(), "a saved-tensor unpack function returned an undefined tensor");
    return t;
  }

 private:
  std::shared_ptr<const SavedTensorPack> pack_;
  SavedTensorUnpack unpack_;
  at::Tensor kept_;
};

class HookingEngine final : public torch::autograd::Engine {
 public:
  HookingEngine() = default;
  ~HookingEngine() override { stop(); }
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (scopes.empty()) return nullptr;
    return std::make_unique<Packed>(scopes.back());
  }
};

torch::autograd::Engine& hooking_engine() {
  static HookingEngine engine;
  return engine;
}

void install_engine() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& current = torch::autograd::Engine::get_default_engine();
    TT_CHECK(&current == &torch::autograd::Engine::get_base_engine(),
             "saved-tensor hooks: another autograd engine (Python's?) is installed in this process; "
             "tt's hooks need LibTorch's own");
    torch::autograd::set_default_engine_stub(&hooking_engine);
  });
}

}  // namespace

SavedTensorHooks::SavedTensorHooks(SavedTensorPack pack) {
  TT_CHECK(pack, "SavedTensorHooks: an empty pack function");
  install_engine();
  scopes.push_back(std::make_shared<const SavedTensorPack>(std::move(pack)));
  depth_ = scopes.size();
}

SavedTensorHooks::~SavedTensorHooks() {
  // Scopes are RAII objects of one thread and end innermost first.
  if (scopes.size() == depth_) scopes.pop_back();
}

bool SavedTensorHooks::active() { return !scopes.empty(); }

}  // namespace tt::nn
