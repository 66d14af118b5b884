// The pipeline's own sections' options (trainer:, output:), declared once: tt/pipeline.h's
// trainer_schema and output_schema (--list and --dry-run print them, the parser checks them).
#include "tt/options.h"
#include "tt/pipeline.h"

namespace tt {

const Schema& trainer_schema() {
  static const Schema s =
      Schema()
          .add("epochs", Type::Int, "~", "passes over the training data (default 1, or unlimited when max_steps is set)")
          .range(ge(1))
          .add("max_steps", Type::Int, "~", "stop after this many optimizer steps (0: none: evaluate and write outputs only)")
          .range(ge(0))
          .add("batch_size", Type::Int, "16", "examples per optimizer step, on each rank (as DDP's: a data-parallel step "
               "takes this many times the world size)")
          .range(ge(1))
          .add("micro_batch_size", Type::Int, "~",
               "examples per forward/backward; gradients accumulate up to batch_size (default: batch_size)")
          .range(ge(1))
          .add("shuffle", Type::Bool, "true", "reshuffle the training data every epoch")
          .add("prefetch", Type::Bool, "true", "fetch the next batch in a background thread")
          .add("grad_clip", Type::Float, "~", "clip the global gradient L2 norm to this value (unset: no clipping)")
          .range(gt(0))
          .add("eval_every", Type::Int, "~",
               "validate every N steps (and at the end) when there is validation data (0 or unset: at the end only)")
          .range(ge(0))
          .add("eval_batch_size", Type::Int, "~", "batch size for validation (default: batch_size)")
          .range(ge(1))
          .add("threads", Type::Int, "0", "intra-op CPU threads; 0 = OMP_NUM_THREADS when set (tt-run --nproc N sets it to the cores / N), else all cores")
          .range(ge(0), le(1024))
          .add("flush_denormal", Type::Bool, "true", "flush denormal floats to zero (much faster on CPU)")
          .add("device", Type::String, "cpu", "cpu, or cuda / cuda:N on a CUDA build")
          .add("memory_cap", Type::Bytes, "~", "raise out-of-memory when live tensor bytes would exceed this")
          .range(gt(0))
          .add("memory_budget", Type::String, "~",
               "e.g. 1.5GiB: tt-run plans the fastest plugins and micro-batch that fit (probe runs), then trains "
               "capped at it with oom-guard")
          .add("cache_allocations", Type::Bool, "true",
               "keep freed CPU blocks >= 64 KiB for reuse instead of returning them to the OS")
          .add("release_library_pages", Type::Bool, "true",
               "before training, give back the pages of the shared libraries' code and constants that set-up "
               "touched (LibTorch's ~290 libraries; madvise MADV_PAGEOUT): any the run needs again are read back")
          .add("log_every", Type::Int, "1", "write a metrics.jsonl line every N steps")
          .range(ge(1))
          .add("checkpoint_every", Type::Int, "~",
               "checkpoint every N steps (0 or unset: by checkpoint_minutes, and the final checkpoint, which is "
               "always written)")
          .range(ge(0))
          .add("checkpoint_minutes", Type::Float, "30",
               "also checkpoint once this many minutes have passed since the last checkpoint (or the start), so a "
               "long run that fails loses at most that much; 0 turns it off")
          .range(ge(0))
          .add("keep_checkpoints", Type::Int, "3", "keep the newest N checkpoints (0 keeps all)")
          .range(ge(0))
          .add("on_nan", Type::String, "error", "a NaN/inf loss: error (stop with a message) or skip (drop the batch)")
          .choices({"error", "skip"})
          .add("progress", Type::String, "auto",
               "auto (a bar on a terminal, lines otherwise), bar, lines or off")
          .choices({"auto", "bar", "lines", "off"})
          .add("dist_rows", Type::String, "all-reduce",
               "data-parallel runs, row-sparse gradients (the topic model's L): all-reduce (summed densely, "
               "every rank sees all documents) or owned (rank r keeps documents i with i % world == r and their "
               "rows; only the other gradients are all-reduced)")
          .choices({"all-reduce", "owned"});
  return s;
}

const Schema& output_schema() {
  static const Schema s = Schema()
                              .add("dir", Type::String, "runs", "parent directory of run directories")
                              .add("run_name", Type::String, "~", "run directory name (default: <name>-<timestamp>)")
                              .add("plots", Type::Bool, "true", "draw PNG plots with gnuplot")
                              .add("export", Type::List, "[]",
                                   "at the end of the fit, write the model's weights for other tools: safetensors "
                                   "(RUN_DIR/model.safetensors), pt (RUN_DIR/model_state_dict.pt, a state dict "
                                   "Python's torch.load reads)")
                              .choices({"safetensors", "pt"});
  return s;
}

}  // namespace tt
