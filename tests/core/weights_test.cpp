// Weights files (tt/weights.h): the safetensors layout byte for byte, both formats' round trips,
// files told apart by content, load_weights' name/shape/dtype checks, a checkpoint's tensors,
// state dicts that are not dicts of tensors; and through tt-run: output.export and --export.
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tt/checkpoint.h"
#include "tt/error.h"
#include "tt/weights.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

tt::NamedTensors sample_tensors() {
  torch::manual_seed(3);
  return {{"blocks.0.attn.qkv.weight", torch::randn({2, 3})},
          {"step", torch::arange(4, torch::kLong)},
          {"half", torch::randn({5}).to(torch::kBFloat16)},
          {"scale", torch::tensor(2.5, torch::kDouble)},
          {"mask", torch::tensor({true, false, true})}};
}

void expect_same(const tt::NamedTensors& a, const tt::NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.scalar_type(), b[i].second.scalar_type()) << a[i].first;
    EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes()) << a[i].first;
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    register_buffer("count", torch::zeros({1}, torch::kLong));
    inner = register_module("inner", std::make_shared<torch::nn::Module>());
    inner->register_parameter("w", torch::randn({4}));
  }
  torch::nn::Linear fc{nullptr};
  std::shared_ptr<torch::nn::Module> inner;
};

}  // namespace

TEST(Weights, SafetensorsLayoutIsTheSpecs) {
  const fs::path f = tt::test::temp_dir("weights") / "w.safetensors";
  const auto tensors = sample_tensors();
  tt::write_safetensors(f, tensors);
  const std::string bytes = tt::test::read_file(f);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "the header is padded to a multiple of 8";
  ASSERT_LE(8 + n, bytes.size());
  const json header = json::parse(bytes.substr(8, n));  // trailing spaces are JSON whitespace
  EXPECT_EQ(header["__metadata__"], json({{"format", "pt"}}));
  const std::map<std::string, std::string> dtypes{{"blocks.0.attn.qkv.weight", "F32"}, {"step", "I64"},
                                                  {"half", "BF16"}, {"scale", "F64"}, {"mask", "BOOL"}};
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    const auto& e = header.at(name);
    EXPECT_EQ(e["dtype"], dtypes.at(name));
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.sizes().vec()) << name;
    const auto off = e["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], at) << name << ": tensors follow each other in the data section";
    EXPECT_EQ(off[1] - off[0], static_cast<uint64_t>(t.numel() * t.element_size())) << name;
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + off[0], t.data_ptr(), off[1] - off[0]), 0)
        << name << ": raw little-endian data at its offsets, relative to the data section";
    at = off[1];
  }
  EXPECT_EQ(8 + n + at, bytes.size()) << "nothing after the last tensor";
}

TEST(Weights, SafetensorsAndStateDictRoundTripBitwise) {
  const fs::path d = tt::test::temp_dir("weights");
  const auto tensors = sample_tensors();
  tt::write_safetensors(d / "a.safetensors", tensors);
  tt::NamedTensors back = tt::read_safetensors(d / "a.safetensors");
  expect_same(tensors, back);
  tt::write_state_dict(d / "a.pt", tensors);
  back = tt::read_state_dict(d / "a.pt");
  expect_same(tensors, back);
}

TEST(Weights, FilesAreToldApartByContentNotByName) {
  const fs::path d = tt::test::temp_dir("weights");
  const auto tensors = sample_tensors();
  tt::write_safetensors(d / "looks_like.pt", tensors);
  tt::write_state_dict(d / "looks_like.safetensors", tensors);
  torch::serialize::OutputArchive ar, model;
  Net net;
  net.save(model);
  ar.write("model", model);
  tt::save_archive_atomic(ar, d / "step-00000001.pt");
  std::ofstream(d / "garbage.pt") << std::string(100, 'z');
  EXPECT_EQ(tt::weights_file_kind(d / "looks_like.pt"), tt::WeightsFileKind::Safetensors);
  EXPECT_EQ(tt::weights_file_kind(d / "looks_like.safetensors"), tt::WeightsFileKind::StateDict);
  EXPECT_EQ(tt::weights_file_kind(d / "step-00000001.pt"), tt::WeightsFileKind::Checkpoint);
  EXPECT_EQ(tt::weights_file_kind(d / "garbage.pt"), tt::WeightsFileKind::Unknown);
  tt::WeightsFileKind kind;
  expect_same(tt::read_weights(d / "looks_like.pt", &kind), tensors);
  EXPECT_EQ(kind, tt::WeightsFileKind::Safetensors);
  expect_same(tt::read_weights(d / "looks_like.safetensors", &kind), tensors);
  EXPECT_EQ(kind, tt::WeightsFileKind::StateDict);
  const std::string e = tt::test::config_error([&] { tt::read_weights(d / "garbage.pt"); });
  EXPECT_NE(e.find("garbage.pt: neither a tt checkpoint"), std::string::npos) << e;
}

TEST(Weights, ModuleTensorsAreTheCheckpointsInStateDictOrder) {
  const fs::path d = tt::test::temp_dir("weights");
  Net net;
  const auto own = tt::module_tensors(net);
  std::vector<std::string> names;
  for (const auto& [n, t] : own) names.push_back(n);
  // PyTorch's state_dict order: a module's parameters, its buffers, then its children's.
  EXPECT_EQ(names, (std::vector<std::string>{"count", "fc.weight", "fc.bias", "inner.w"}));
  torch::serialize::OutputArchive ar, model;
  net.save(model);
  ar.write("model", model);
  tt::save_archive_atomic(ar, d / "step-00000001.pt");
  expect_same(tt::checkpoint_model_tensors(d / "step-00000001.pt"), own);
}

TEST(Weights, LoadChecksEveryNameShapeAndDtypeAndChangesNothingOnAMismatch) {
  Net a, b;
  tt::load_weights(b, tt::module_tensors(a), "a.safetensors");
  expect_same(tt::module_tensors(b), tt::module_tensors(a));
  EXPECT_TRUE(b.fc->weight.requires_grad()) << "loading keeps the parameters trainable";

  Net c;
  const auto before = tt::module_tensors(c);
  std::vector<at::Tensor> copies;
  for (const auto& [n, t] : before) copies.push_back(t.clone());
  tt::NamedTensors bad = tt::module_tensors(a);
  bad.erase(bad.begin() + 3);                                          // inner.w missing
  bad.emplace_back("fc.weihgt", torch::zeros({2, 3}));                 // unexpected
  bad[1].second = torch::zeros({3, 2});                                // fc.weight mis-shaped
  bad[2].second = torch::zeros({2}, torch::kDouble);                   // fc.bias of another dtype
  const std::string e = tt::test::config_error([&] { tt::load_weights(c, bad, "x.safetensors"); });
  for (const char* w : {"x.safetensors does not fit this model", "missing (1): inner.w", "unexpected (1): fc.weihgt",
                        "fc.weight is [3, 2] there but [2, 3] here", "fc.bias is Double there but Float here"})
    EXPECT_NE(e.find(w), std::string::npos) << "missing '" << w << "' in: " << e;
  const auto after = tt::module_tensors(c);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(torch::equal(after[i].second, copies[i])) << after[i].first;
}

TEST(Weights, StateDictsThatAreNotDictsOfTensorsAreRefused) {
  const fs::path d = tt::test::temp_dir("weights");
  auto save = [&](const std::string& name, const c10::IValue& v) {
    const auto bytes = torch::pickle_save(v);
    std::ofstream(d / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return d / name;
  };
  c10::List<at::Tensor> list;
  list.push_back(torch::ones({2}));
  EXPECT_NE(tt::test::config_error([&] { tt::read_state_dict(save("list.pt", list)); }).find("list.pt: holds a GenericList, not a dict"),
            std::string::npos);
  c10::impl::GenericDict mixed(c10::StringType::get(), c10::AnyType::get());
  mixed.insert("w", torch::ones({2}));
  mixed.insert("n", int64_t{3});
  EXPECT_NE(tt::test::config_error([&] { tt::read_state_dict(save("mixed.pt", mixed)); }).find("mixed.pt: 'n' holds a Int, not a tensor"),
            std::string::npos);
  EXPECT_NE(tt::test::config_error([&] { tt::read_state_dict(save("tensor.pt", torch::ones({2}))); }).find("tensor.pt: holds a Tensor"),
            std::string::npos);
  std::ofstream(d / "legacy.pt", std::ios::binary) << std::string("\x80\x02\x8a\x0a", 4) << std::string(40, 'x');
  EXPECT_NE(tt::test::config_error([&] { tt::read_state_dict(d / "legacy.pt"); }).find("legacy.pt: this is the legacy (non-zip) torch.save format"),
            std::string::npos);
}

// Through tt-run: output.export at the end of the fit, and --export of the run afterwards (its
// final checkpoint: the same tensors, so the same bytes), of a checkpoint file with --out, and
// its refusals.
TEST(Weights, TtRunExportsAtTheEndOfTheFitAndFromARunOrCheckpoint) {
  const fs::path d = tt::test::temp_dir("weights-run");
  std::ofstream(d / "p.yaml") << tt::test::topic_yaml(d, "  max_steps: 3\n");
  const std::string tt_run = tt::test::tt_run_bin();
  auto r = tt::test::run(tt_run + " -q " + (d / "p.yaml").string() + " --run-dir " + (d / "run").string() +
                         " 'output.export=[safetensors, pt]'");
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto at_end = tt::read_safetensors(d / "run" / "model.safetensors");
  std::vector<std::string> names;
  for (const auto& [n, t] : at_end) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"L_raw", "F_raw"}));
  expect_same(tt::read_state_dict(d / "run" / "model_state_dict.pt"), at_end);
  const auto ckpts = tt::list_checkpoints(d / "run" / "checkpoints");
  ASSERT_FALSE(ckpts.empty());
  expect_same(tt::checkpoint_model_tensors(ckpts.back()), at_end);
  // the safetensors file records the model as the checkpoint does (model.init_from checks it);
  // the state dict holds tensors only
  const tt::ModelRecord record = tt::read_model_record(d / "run" / "model.safetensors");
  EXPECT_HAS(record.options_yaml, "name: topic");
  EXPECT_EQ(record.options_yaml, tt::read_model_record(ckpts.back()).options_yaml);
  EXPECT_EQ(record.data, tt::read_model_record(ckpts.back()).data);
  EXPECT_TRUE(tt::read_model_record(d / "run" / "model_state_dict.pt").empty());

  r = tt::test::run(tt_run + " --export safetensors " + (d / "run").string() + " --out " + (d / "again.safetensors").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("2 tensors of " + ckpts.back().string()), std::string::npos) << r.output;
  EXPECT_EQ(tt::test::read_file(d / "again.safetensors"), tt::test::read_file(d / "run" / "model.safetensors"));
  r = tt::test::run(tt_run + " -q --export pt " + ckpts.back().string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const fs::path beside = ckpts.back().parent_path() / (ckpts.back().stem().string() + "_state_dict.pt");
  expect_same(tt::read_state_dict(beside), at_end);
  EXPECT_EQ(tt::list_checkpoints(d / "run" / "checkpoints").size(), ckpts.size()) << "not taken for a checkpoint";

  // --out replaces an earlier export (again.safetensors, above: rc 0 twice), never a checkpoint or
  // another file
  r = tt::test::run(tt_run + " -q --export safetensors " + (d / "run").string() + " --out " + (d / "again.safetensors").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  const std::string checkpoint = tt::test::read_file(ckpts.back());
  r = tt::test::run(tt_run + " --export safetensors " + (d / "run").string() + " --out " + ckpts.back().string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--out " + ckpts.back().string() + " exists and is a tt checkpoint");
  EXPECT_EQ(tt::test::read_file(ckpts.back()), checkpoint);
  r = tt::test::run(tt_run + " --export pt " + (d / "run").string() + " --out " + (d / "p.yaml").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "exists and is not an exported weights file");

  // the newest checkpoint unreadable: the one before is exported, and that is said (even with -q)
  r = tt::test::run(tt_run + " -q " + (d / "p.yaml").string() + " --run-dir " + (d / "cut").string() +
                    " trainer.checkpoint_every=1");
  ASSERT_EQ(r.rc, 0) << r.output;
  fs::resize_file(d / "cut" / "checkpoints" / "step-00000003.pt", 100);
  r = tt::test::run(tt_run + " -q --export safetensors " + (d / "cut").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "warning: the newest checkpoint of " + (d / "cut").string() + " could not be read, so the "
                       "weights are step-00000002.pt's, not the run's last:");
  EXPECT_HAS(r.output, "step-00000003.pt");

  r = tt::test::run(tt_run + " --export onnx " + (d / "run").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("unknown weights format 'onnx'"), std::string::npos) << r.output;
  r = tt::test::run(tt_run + " --export pt " + (d / "run" / "model.safetensors").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("is a safetensors file, not a tt checkpoint"), std::string::npos) << r.output;
  r = tt::test::run(tt_run + " --export pt " + (d / "nothing").string());
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("nothing does not exist"), std::string::npos) << r.output;
  r = tt::test::run(tt_run + " -q " + (d / "p.yaml").string() + " --run-dir " + (d / "bad").string() +
                    " 'output.export=[onnx]'");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("onnx"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("safetensors"), std::string::npos) << r.output;
}
