#pragma once
// A model is a torch Module that turns a batch into a loss.
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "tt/batch.h"
#include "tt/export.h"

namespace torch::optim {
class Optimizer;
}

namespace tt {

struct State;
class Dataset;

enum class Reduction {
  Sum,   // loss is a sum over the batch's examples: micro-batch losses add up
  Mean,  // loss is a mean: micro-batch losses are weighted by their share of the batch
};

struct ModelOutput {
  at::Tensor loss;                         // scalar
  Reduction reduction = Reduction::Mean;
  int64_t items = 0;                       // tokens/examples processed, for throughput
  std::map<std::string, at::Tensor> extra; // anything plugins or metrics may want
};

// What a model's output layer reads and does (extension point 10 of tt/extension.h), for a loss
// hook that computes the loss from it: chunked cross-entropy (the logits a few rows at a time,
// never all at once), distillation (a teacher's distribution beside the student's). A model
// that declares the part "output_head" (tt/registry.h) returns it from Model::output_head, and
// its forward_loss is then cross-entropy(project(hidden), target) with `reduction` over the rows.
struct OutputHead {
  at::Tensor hidden;  // [N, d]: what the head reads, one row per prediction, in the autograd graph
  at::Tensor target;  // [N] int64: each row's class
  at::Tensor weight;  // [C, d]: the head's weight (a parameter, or the one it is tied to)
  at::Tensor bias;    // [C], or undefined: the head has none (a custom autograd Function refuses
                      // an undefined input: leave it out of apply() then)
  // The head itself on any rows of hidden, [n, d] -> [n, C] logits, exactly as the model's forward
  // computes them: adapters on the head (lora) and its keep_fp32 switch (amp) included. Under
  // amp's autocast it computes in bf16/fp16 unless the head keeps float32.
  std::function<at::Tensor(const at::Tensor& rows)> project;
  // project(rows) is rows weight^T + bias and nothing else (no adapter on the head): a loss may
  // then compute the logits from weight and bias itself (in float32 it then differs from the
  // model's autocast loss by bf16/fp16 rounding). When false it must call project.
  bool plain = true;
  Reduction reduction = Reduction::Mean;  // the model's loss: the mean (or sum) over the N rows
  int64_t items = 0;                      // as ModelOutput::items
};

// Text generation settings (tt-run --sample PROMPT --tokens N --temperature T --top-k K).
struct GenerateOptions {
  int64_t tokens = 200;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: sample from the whole vocabulary
  uint64_t seed = 0;
};

// What Model::fused_step did: `stepped` false leaves the step to the trainer's usual path.
struct FusedStep {
  bool stepped = false;
  ModelOutput output;  // when stepped: as forward_loss returns it, the loss a scalar with no graph
};

class TT_API Model : public torch::nn::Module {
 public:
  ~Model() override;
  virtual ModelOutput forward_loss(const Batch& batch) = 0;
  // Validation metrics; by default the example-weighted mean loss over the dataset. The trainer
  // calls it in eval mode under torch::NoGradGuard and puts the model back in training mode after.
  virtual std::map<std::string, double> evaluate(Dataset& data, int64_t batch_size);
  // Called once at the end of training: write fitted parameters, samples, tables.
  virtual void write_outputs(const std::filesystem::path& run_dir, State& state);
  // Called once the optimizer exists (after plugins had the OPTIMIZER event, and again after
  // a resume): a model may hand it hints, e.g. FusedAdamW::dense_rows for a parameter whose
  // gradient it can produce as a sparse tensor of rows (the topic model's L).
  // `gradients_read` is true when something besides the optimizer reads .grad (a plugin,
  // trainer.grad_clip): then gradients must stay the ordinary dense tensors everyone expects.
  virtual void on_optimizer(torch::optim::Optimizer& /*optimizer*/, bool /*gradients_read*/) {}
  // Continues `prompt` (language models). The default refuses: this model does not generate.
  virtual std::string generate(const std::string& prompt, const GenerateOptions& options);
  // Predicts for the examples in `input` (a file the model reads, e.g. a CSV table) and writes
  // them to `output` (tt-run --predict). The default refuses: this model does not predict files.
  virtual void predict(const std::filesystem::path& input, const std::filesystem::path& output);
  // Checks what it cheaply can of the file predict() will be given (its columns, say), once the
  // model is built and before anything trains (Trainer::will_predict): a ConfigError naming
  // the file and the fix refuses it then rather than after training. The default checks nothing.
  virtual void check_predict_input(const std::filesystem::path& /*input*/) const {}
  // Predicted bytes of the tensors one forward pass keeps for backward at this micro-batch
  // size, before running it (planning, and checked against the meter); -1: no estimate.
  virtual int64_t estimate_activation_bytes(int64_t /*micro_batch_size*/) const { return -1; }
  // True for a model whose steps are too small (a few hundred microseconds) for an OpenMP
  // team: with trainer.threads >= 2 and prefetch on, the trainer lends the prefetch thread
  // to tt::parallel_for (tt/helper.h) instead, and the model's loops use that.
  virtual bool small_steps() const { return false; }
  // Trains one step itself: the loss, its gradients and the optimizer's update in one pass of
  // the model's own, for a model whose step is too small for autograd and an optimizer's
  // separate passes over memory (the topic model). The trainer offers it only where nothing else
  // is to see the step in between: no plugins, no gradient clipping, one micro-batch, one
  // process. The learning rate is the optimizer's (the schedule sets it as usual). Return
  // stepped false, having changed nothing, to have the trainer take its usual path (e.g. an
  // optimizer the model does not know). With a loss that is not finite, the parameters and the
  // optimizer's state must be left as they were (the trainer applies trainer.on_nan).
  virtual FusedStep fused_step(const Batch& /*batch*/, torch::optim::Optimizer& /*optimizer*/) { return {}; }
  // The output head for this batch (OutputHead above), the forward pass up to the head done with
  // autograd recording as usual. The default refuses (ConfigError): this model exposes none;
  // a model that implements it declares the part "output_head" when it registers.
  virtual OutputHead output_head(const Batch& batch);
  // The values the factory chose for options the pipeline left unset (~) or derived (from the
  // data, from target_params), by option key, as YAML text. Checkpoints record them beside the
  // model's options, so tt::load_model (tt/weights.h) builds this model again over other data
  // (a teacher over its student's). Default: none derived.
  virtual std::map<std::string, std::string> derived_options() const { return {}; }
  // What the weights mean in terms of the data they were trained on, where it can differ between
  // data the model reads: an LM's tokenizer ("tokenizer sentencepiece (bpe, 4096) 9f3c..."); ""
  // when nothing. Checkpoints record it; tt::load_model and model.init_from refuse a checkpoint
  // whose record differs from the model built over this run's data (its ids would mean other
  // tokens: silent garbage). Default: "".
  virtual std::string data_identity() const { return ""; }
  // One line for the summary ("topic model: 1000 docs x 1000 terms, k=10").
  virtual std::string describe() const { return name(); }
};

}  // namespace tt
