// The tabular learner's weights through tt-run: output.export writes model.safetensors and
// model_state_dict.pt; model.init_from takes either (or the run's checkpoint) and the predictions
// are bitwise the same. With Debian's python3-torch: Python reads both files and gets the
// checkpoint's tensors, and a state dict Python saved is imported with exactly its values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint_reader.h"
#include "tabular_test_util.h"
#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/npy.h"
#include "tt/weights.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Exported {
  fs::path dir = tt::test::temp_dir("tabular_export");
  std::string csv = (dir / "blobs.csv").string();
  Exported() {
    std::mt19937 rng(1);
    std::normal_distribution<double> n(0, 1);
    std::ofstream f(csv);
    f << "a,b,kind,c\n";
    for (int i = 0; i < 90; ++i) {
      const int k = i % 3;
      f << 3 * k + n(rng) << "," << -2 * k + n(rng) << ",k" << k << "," << n(rng) << "\n";
    }
  }
  // A pipeline on the CSV; `model_extra` goes into the model's map, `trainer` is the trainer's.
  tt::test::RunResult run(const std::string& tag, const std::string& model_extra, const std::string& trainer,
                          const std::string& output_extra = "", const std::string& args = "") const {
    const auto yaml = dir / (tag + ".yaml");
    std::ofstream(yaml) << "name: " << tag << "\nseed: 0\ndata: {name: tabular-csv, path: " << csv
                        << ", label: kind, support_size: 24, query_size: 8, episodes: 4}\nmodel: " << kTinyModel
                        << model_extra << "}\noptimizer: {name: adamw, lr: 1.0e-3}\ntrainer: " << trainer
                        << "\noutput: {dir: " << dir.string() << ", plots: false" << output_extra << "}\n";
    return tt::test::run(tt::test::tt_run_bin() + " " + yaml.string() + " -q --run-dir " + (dir / tag).string() + " " + args);
  }
  // Three steps from scratch, exported both ways.
  void train_source() const {
    const auto r = run("src", "", "{max_steps: 3, batch_size: 2, threads: 1}", ", export: [safetensors, pt]");
    ASSERT_EQ(r.rc, 0) << r.output;
  }
  // An evaluation-only run from `from`, with --predict; returns the predictions file's text.
  std::string predict(const std::string& tag, const std::string& from) const {
    const fs::path out = dir / (tag + "-pred.csv");
    const auto r = run(tag, from.empty() ? "" : ", init_from: " + from, "{max_steps: 0, threads: 1}", "",
                       "--predict " + csv + " --predict-out " + out.string());
    EXPECT_EQ(r.rc, 0) << r.output;
    // no step, no training loss (it said 0)
    EXPECT_FALSE(tt::test::summary_of(dir / tag).contains("final_loss")) << tag;
    return tt::test::read_file(out);
  }
  json validation(const std::string& tag) const {
    return tt::test::summary_of(dir / tag)["validation"];
  }
  fs::path checkpoint() const { return tt::list_checkpoints(dir / "src" / "checkpoints").back(); }
};

}  // namespace

TEST(TabularExport, ReimportedWeightsPredictBitwiseAsTheCheckpoint) {
  Exported e;
  e.train_source();
  const std::string from_checkpoint = e.predict("ckpt", (e.dir / "src").string());
  const std::string from_safetensors = e.predict("st", (e.dir / "src" / "model.safetensors").string());
  const std::string from_pt = e.predict("pt", (e.dir / "src" / "model_state_dict.pt").string());
  ASSERT_FALSE(from_checkpoint.empty());
  EXPECT_EQ(from_safetensors, from_checkpoint);
  EXPECT_EQ(from_pt, from_checkpoint);
  EXPECT_EQ(e.validation("st"), e.validation("ckpt")) << "every metric, to the last bit of its double";
  EXPECT_EQ(e.validation("pt"), e.validation("ckpt"));
  EXPECT_NE(e.predict("fresh", ""), from_checkpoint) << "the predictions depend on the weights";
  // The log says what each file was taken for (by its content).
  EXPECT_NE(tt::test::read_file(e.dir / "st" / "log.txt").find("model.safetensors (safetensors file)"), std::string::npos);
  EXPECT_NE(tt::test::read_file(e.dir / "pt" / "log.txt").find("model_state_dict.pt (PyTorch state dict)"), std::string::npos);
  EXPECT_NE(tt::test::read_file(e.dir / "ckpt" / "log.txt").find("(tt checkpoint)"), std::string::npos);
  // --resume of an evaluation-only run (it trains no steps, so it has no checkpoint) predicts with
  // the weights it was run with; it used to fail with "no checkpoint to resume from".
  const fs::path again = e.dir / "st-again.csv";
  const auto r = tt::test::run(tt::test::tt_run_bin() + " --resume " + (e.dir / "st").string() + " -q --predict " +
                               e.csv + " --predict-out " + again.string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tt::test::read_file(again), from_safetensors);
  // its summary.json records that prediction (it was left as the first run wrote it), the rest as it was
  const json after = tt::test::summary_of(e.dir / "st");
  ASSERT_TRUE(after.contains("prediction")) << after.dump(2);
  EXPECT_EQ(after["prediction"]["output"], again.string());
  EXPECT_GT(after["prediction"]["peak_tensor_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(after["validation"], e.validation("ckpt"));
  EXPECT_EQ(after["status"], "completed");
}

TEST(TabularExport, PythonReadsBothFilesAndTtImportsWhatPythonSaved) {
  const std::string py = tt::test::python_with("torch");
  if (py.empty()) GTEST_SKIP() << "Python's torch is not installed (apt-get install python3-torch to run this test)";
  Exported e;
  e.train_source();
  // The checkpoint's tensors, read by the tests' own archive reader, as .npy for numpy.
  const auto params = tt::test::checkpoint_params(e.checkpoint());
  ASSERT_FALSE(params.empty());
  fs::create_directories(e.dir / "npy");
  for (const auto& [name, t] : params) tt::write_npy(e.dir / "npy" / (name + ".npy"), t);
  const std::string script = R"(
import collections, json, os, sys
import numpy as np, torch
d = sys.argv[1]
expected = {f[:-4]: torch.from_numpy(np.load(os.path.join(d, 'npy', f))) for f in os.listdir(os.path.join(d, 'npy'))}
# weights_only: what torch.load does by default from PyTorch 2.6 (no globals beyond tensors)
sd = torch.load(os.path.join(d, 'src', 'model_state_dict.pt'), weights_only=True)
assert type(sd) is dict, type(sd)
assert set(sd) == set(expected), (sorted(sd), sorted(expected))
for k, v in expected.items():
    assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), k
raw = open(os.path.join(d, 'src', 'model.safetensors'), 'rb').read()
n = int.from_bytes(raw[:8], 'little')
header = json.loads(raw[8:8 + n])
# safetensors' own key, and the record of the model tt checks model.init_from by (docs/export.md)
meta = header.pop('__metadata__')
assert meta['format'] == 'pt' and set(meta) == {'format', 'tt.model', 'tt.data'}, meta
assert meta['tt.model'].startswith('name: tabular-icl\n') and '\nn_heads: ' in meta['tt.model'], meta
assert set(header) == set(expected), sorted(header)
dtypes = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64, 'BF16': torch.bfloat16}
for k, h in header.items():
    b, end = h['data_offsets']
    t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + end]), dtype=dtypes[h['dtype']]).reshape(h['shape'])
    assert torch.equal(t, expected[k]), k
name = next(iter(sd))
sd[name] = sd[name] + 0.25
torch.save(sd, os.path.join(d, 'py.pt'))
torch.save(collections.OrderedDict(sd), os.path.join(d, 'ordered.pt'))
print('changed', name)
)";
  std::ofstream(e.dir / "check.py") << script;
  auto r = tt::test::run(py + " " + (e.dir / "check.py").string() + " " + e.dir.string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto at = r.output.find("changed ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string changed = r.output.substr(at + 8, r.output.find('\n', at) - at - 8);
  ASSERT_TRUE(params.count(changed)) << changed;

  r = e.run("frompy", ", init_from: " + (e.dir / "py.pt").string(), "{max_steps: 0, threads: 1}", ", export: [safetensors]");
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto imported = tt::read_safetensors(e.dir / "frompy" / "model.safetensors");
  ASSERT_EQ(imported.size(), params.size());
  for (const auto& [name, t] : imported) {
    const at::Tensor want = name == changed ? params.at(name) + 0.25 : params.at(name);
    EXPECT_TRUE(torch::equal(t, want)) << name << (name == changed ? " (changed in Python)" : "");
  }
  // state_dict() itself is an OrderedDict, which LibTorch cannot unpickle: refused with the fix.
  r = e.run("ordered", ", init_from: " + (e.dir / "ordered.pt").string(), "{max_steps: 0, threads: 1}");
  EXPECT_EQ(r.rc, 2) << r.output;
  for (const char* w : {"ordered.pt", "init_from", "collections.OrderedDict", "torch.save(dict(model.state_dict()), path)"})
    EXPECT_NE(r.output.find(w), std::string::npos) << "missing '" << w << "' in: " << r.output;
}
