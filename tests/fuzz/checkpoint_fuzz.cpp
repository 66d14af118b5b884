// The checkpoint archive as --resume reads it (core/src/train/checkpoints.cpp,
// load_checkpoint_file): LibTorch's InputArchive, the trainer's entries read with the types it
// expects, every tensor of the model and optimizer archives, the random generator's state and
// the stream position (tt::tensor_to_bytes). Both readers of archives (load_checkpoint,
// init_from) take any std::exception as "this checkpoint is unreadable" and name the file
// (LibTorch's unpickler throws std::out_of_range and others besides c10::Error), so here any
// std::exception is a refusal and only crashes and sanitizer reports are findings. LibTorch is
// not instrumented: this harness finds crashes there but is not guided through it. Leaks inside
// libtorch_cpu (its zip reader on a damaged archive) are suppressed by lsan.supp (tools/fuzz.sh).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/input-archive.h>

#include "fuzz_util.h"
#include "tt/checkpoint.h"

namespace {

// Every entry of an archive and of the archives inside it, as LibTorch reads them.
void read_all(torch::serialize::InputArchive& ar, int depth) {
  for (const std::string& key : ar.keys()) {
    at::Tensor t;
    if (ar.try_read(key, t)) {
      (void)t.sum();  // the tensor's storage is all there
      continue;
    }
    c10::IValue v;
    if (ar.try_read(key, v)) continue;
    torch::serialize::InputArchive sub;
    if (depth < 4 && ar.try_read(key, sub)) read_all(sub, depth + 1);
  }
}

int64_t read_int(torch::serialize::InputArchive& ar, const std::string& key) {
  c10::IValue v;
  ar.read(key, v);
  return v.toInt();
}

double read_double(torch::serialize::InputArchive& ar, const std::string& key) {
  c10::IValue v;
  ar.read(key, v);
  return v.toDouble();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const auto path = write_file("step-00000001.pt", as_view(data, size));
  // As tt reads a checkpoint (resume, init_from): records that fail their CRC-32 are refused
  // before LibTorch parses them (its TorchScript type parser crashes on some).
  if (!tt::archive_damage(path).empty()) return 0;
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path.string());
    c10::IValue names;
    ar.read("trainer/plugins", names);
    (void)names.toStringRef();
    c10::IValue ws;
    if (ar.try_read("trainer/world_size", ws)) (void)ws.toInt();
    torch::serialize::InputArchive model_ar, opt_ar, plugin_ar;
    ar.read("model", model_ar);
    read_all(model_ar, 0);
    ar.read("optimizer", opt_ar);
    read_all(opt_ar, 0);
    if (ar.try_read("plugin_0", plugin_ar)) read_all(plugin_ar, 0);
    at::Tensor rng;
    ar.read("trainer/rng_cpu", rng);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
    gen.set_state(rng);
    for (const char* key : {"trainer/step", "trainer/next_epoch", "trainer/next_batch", "trainer/skipped",
                            "trainer/epoch_batches", "trainer/micro_batch_size"})
      (void)read_int(ar, key);
    (void)read_double(ar, "trainer/epoch_loss_sum");
    (void)read_double(ar, "trainer/lr");
    at::Tensor pos;
    if (ar.try_read("trainer/data_position", pos)) {
      const std::string bytes = tt::tensor_to_bytes(pos);
      expect(static_cast<int64_t>(bytes.size()) == pos.numel(), "tensor_to_bytes: one byte per element");
    }
  } catch (const std::exception&) {
  }
  return 0;
}
