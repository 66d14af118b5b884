// mlp: an example tt model, and the template to copy for your own (docs/models.md).
//
// An MLP classifier on a numeric CSV table (a header row, feature columns, an integer class
// column), with the dataset that reads the table: model `mlp`, dataset `csv-table`.
//   data:  {name: csv-table, path: table.csv}
//   model: {name: mlp, hidden: 32, layers: 2}
//
// The parts every model module has:
//   1. a Dataset (size(), get(indices) -> Batch, info() with the dimensions the model needs)
//      and a DatasetFactory returning the train and validation sets;
//   2. a class deriving tt::Model: forward_loss(Batch) -> ModelOutput (loss, reduction, items),
//      and evaluate() when the validation reports more than val_loss (here val_accuracy);
//   3. options declared once in a Schema (field() binds each to a struct member, with its
//      default, range and doc line; validate() checks options taken together);
//   4. TT_MODULE(...) naming the module and a function that registers the model and dataset.
// The trainer owns the rest: optimizer, batches, checkpoints (the model's parameters and
// buffers), metrics.jsonl, summary.json, the memory meter.
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "tt/dataset.h"
#include "tt/error.h"
#include "tt/model.h"
#include "tt/runtime.h"
#include "tt/module.h"
#include "tt/nn.h"
#include "tt/registry.h"

namespace {

// ---------------------------------------------------------------- the dataset

struct TableOptions {
  std::string path;
  std::string label;
  double validation;
};

// Rows of features x [N, F] (float) and class ids y [N] (int64), held in memory.
class Table final : public tt::Dataset {
 public:
  Table(at::Tensor x, at::Tensor y, int64_t classes) : x_(std::move(x)), y_(std::move(y)), classes_(classes) {}
  int64_t size() const override { return x_.size(0); }
  tt::Batch get(const at::Tensor& indices) override {
    tt::Batch b;  // per-example tensors share their first dimension; b.size is set by set()
    b.set("x", x_.index_select(0, indices));
    b.set("y", y_.index_select(0, indices));
    return b;
  }
  // What the model is built from: the factory reads it, so no option repeats the table's shape.
  std::map<std::string, int64_t> info() const override { return {{"features", x_.size(1)}, {"classes", classes_}}; }
  std::string describe() const override {
    return std::to_string(size()) + " rows x " + std::to_string(x_.size(1)) + " features";
  }

 private:
  at::Tensor x_, y_;
  int64_t classes_;
};

// Reads the table, splits it (shuffled with the pipeline's seed) and standardizes the features
// with the training rows' mean and deviation. What needs the data is checked here, naming the
// option and the file: a ConfigError is shown as a configuration mistake, not a crash.
tt::Datasets make_table(const tt::Options& options, uint64_t seed) {
  const auto o = options.to<TableOptions>();
  std::ifstream in(o.path);
  TT_CHECK_AS(ConfigError, in, "data.path: cannot read '", o.path, "'");
  std::string line, cell;
  std::getline(in, line);
  std::vector<std::string> header;
  for (std::stringstream ss(line); std::getline(ss, cell, ',');) header.push_back(cell);
  const auto label_at = std::find(header.begin(), header.end(), o.label) - header.begin();
  TT_CHECK_AS(ConfigError, label_at < static_cast<int64_t>(header.size()), "data.label: '", o.label,
              "' is not a column of ", o.path, " (its header: ", line, ")");
  std::vector<float> features;
  std::vector<int64_t> labels;
  for (int64_t row = 2; std::getline(in, line); ++row) {
    if (line.empty()) continue;
    int64_t column = 0;
    try {
      for (std::stringstream ss(line); std::getline(ss, cell, ','); ++column) {
        if (column == label_at) labels.push_back(std::stoll(cell));
        else features.push_back(std::stof(cell));
      }
    } catch (const std::exception&) {
      TT_FAIL_AS(ConfigError, o.path, ":", row, ": '", cell, "' is not a number");
    }
    TT_CHECK_AS(ConfigError, column == static_cast<int64_t>(header.size()), o.path, ":", row, ": ", column,
                " cells, the header has ", header.size());
  }
  const int64_t n = static_cast<int64_t>(labels.size()), f = static_cast<int64_t>(header.size()) - 1;
  const int64_t n_val = static_cast<int64_t>(o.validation * static_cast<double>(n));
  TT_CHECK_AS(ConfigError, n - n_val >= 2, o.path, " has ", n, " rows: too few to train on");
  auto x = torch::from_blob(features.data(), {n, f}, torch::kFloat).clone();
  auto y = torch::from_blob(labels.data(), {n}, torch::kLong).clone();
  TT_CHECK_AS(ConfigError, y.min().item<int64_t>() >= 0, o.path, ": the classes are numbered 0, 1, 2, ...");
  const int64_t classes = y.max().item<int64_t>() + 1;

  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const auto perm = torch::tensor(order, torch::kLong);
  const auto val = perm.slice(0, 0, n_val), train = perm.slice(0, n_val);
  const auto train_x = x.index_select(0, train);
  const auto mean = train_x.mean(0), scale = train_x.std(0).clamp_min(1e-6);
  x = (x - mean) / scale;
  tt::Datasets d;
  d.train = std::make_shared<Table>(x.index_select(0, train), y.index_select(0, train), classes);
  if (n_val > 0) d.validation = std::make_shared<Table>(x.index_select(0, val), y.index_select(0, val), classes);
  return d;
}

// ---------------------------------------------------------------- the model

struct MlpOptions {
  int64_t hidden;
  int64_t layers;
  double dropout;
};

class Mlp final : public tt::Model {
 public:
  Mlp(int64_t features, int64_t classes, const MlpOptions& o) : o_(o), classes_(classes) {
    int64_t width = features;
    // tt::nn::Linear is torch's Linear that technique plugins can act on (lora adds adapters
    // to it): hence parts {"linear"} at registration.
    for (int64_t i = 0; i < o.layers; ++i, width = o.hidden)
      hidden_.push_back(register_module("hidden" + std::to_string(i), tt::nn::Linear(width, o.hidden)));
    head_ = register_module("head", tt::nn::Linear(width, classes));
  }

  at::Tensor logits(at::Tensor x) {
    for (auto& layer : hidden_) x = torch::dropout(torch::relu(layer(x)), o_.dropout, is_training());
    return head_(x);
  }

  tt::ModelOutput forward_loss(const tt::Batch& batch) override {
    tt::ModelOutput out;
    out.loss = tt::nn::cross_entropy(logits(batch.at("x")), batch.at("y"));  // a scalar: the batch's mean
    out.reduction = tt::Reduction::Mean;  // micro-batches are weighted by their share of the batch
    out.items = batch.size;               // what was processed: examples (tokens for an LM)
    return out;
  }

  // The trainer calls this in eval mode under torch::NoGradGuard and restores the modes after.
  // Metrics are named val_*; keep val_loss, which tt-run --compare shows for each variant.
  std::map<std::string, double> evaluate(tt::Dataset& data, int64_t batch_size) override {
    const auto device = head_->weight.device();
    double loss = 0, correct = 0;
    const int64_t n = data.size();
    for (int64_t begin = 0; begin < n; begin += batch_size) {
      tt::stop_if_interrupted();  // Ctrl-C: the trainer abandons a periodic evaluation, checkpoints
      const tt::Batch b = data.get(torch::arange(begin, std::min(n, begin + batch_size), torch::kLong)).to(device);
      const auto z = logits(b.at("x"));
      loss += tt::nn::cross_entropy(z, b.at("y")).item<double>() * static_cast<double>(b.size);
      correct += z.argmax(1).eq(b.at("y")).sum().item<double>();
    }
    return {{"val_loss", loss / static_cast<double>(n)}, {"val_accuracy", correct / static_cast<double>(n)}};
  }

  // Bytes of the tensors one forward keeps for backward (the meter measures them; summary.json
  // shows both): per example, each hidden layer's ReLU output (float32) and, with dropout, its
  // output and its mask (float32 on the CPU); the logits and their log-sum-exp. A pre-ReLU
  // output is freed once ReLU has read it, and the input belongs to the batch.
  int64_t estimate_activation_bytes(int64_t micro_batch_size) const override {
    const int64_t per_hidden = 4 + (o_.dropout > 0 ? 4 + 4 : 0);
    return micro_batch_size * (o_.layers * o_.hidden * per_hidden + 4 * (classes_ + 1));
  }

  std::string describe() const override {
    return "mlp: " + std::to_string(o_.layers) + " x " + std::to_string(o_.hidden) + " -> " +
           std::to_string(classes_) + " classes";
  }

 private:
  MlpOptions o_;
  int64_t classes_;
  std::vector<tt::nn::Linear> hidden_;
  tt::nn::Linear head_{nullptr};
};

// ---------------------------------------------------------------- registration

void register_components(tt::Registry& r) {
  r.add_model(
      "mlp", "an MLP classifier for numeric tables (the model template)",
      tt::Schema()
          .field("hidden", &MlpOptions::hidden, 32, "width of each hidden layer")
          .range(tt::ge(1))
          .field("layers", &MlpOptions::layers, 2, "hidden layers (0: a linear classifier)")
          .range(tt::ge(0))
          .field("dropout", &MlpOptions::dropout, 0.0, "dropout after each hidden layer")
          .range(tt::ge(0), tt::lt(1))
          // Options taken together, checked when the pipeline is read (tt-run --dry-run too).
          .validate([](const tt::Options& o) {
            o.check(o.get_float("dropout") == 0 || o.get_int("layers") > 0, "dropout",
                    "needs layers >= 1 (it is applied after each hidden layer)");
          }),
      [](const tt::Options& o, const tt::Datasets& data) -> std::shared_ptr<tt::Model> {
        const auto dims = data.train->info();  // the dataset's shape, not options
        return std::make_shared<Mlp>(dims.at("features"), dims.at("classes"), o.to<MlpOptions>());
      },
      std::vector<std::string>{"linear"},  // parts: tt::nn::Linear layers (lora may adapt them)
      std::vector<std::string>{});         // abilities: neither generate (--sample) nor predict (--predict)
  r.add_dataset("csv-table", "a numeric CSV table with a header row and an integer class column",
                tt::Schema()
                    .field("path", &TableOptions::path, std::string("table.csv"), "the CSV file")
                    .field("label", &TableOptions::label, std::string("label"), "the class column (0, 1, 2, ...)")
                    .field("validation", &TableOptions::validation, 0.2, "share of rows held out for validation")
                    .range(tt::ge(0), tt::lt(1)),
                &make_table);
}

}  // namespace

TT_MODULE("model", "mlp", "an MLP classifier and its CSV table dataset (the model template)", register_components)
