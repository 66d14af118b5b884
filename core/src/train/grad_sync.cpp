#include "train/grad_sync.h"

#include <torch/torch.h>

#include <cstdlib>
#include <sstream>

#include "train/run.h"
#include "tt/dist.h"
#include "tt/log.h"
#include "tt/runtime.h"

namespace tt {

GradSync::GradSync(Run& run) : run_(run) {
  owned_rows_ = run.pipeline.trainer.get_string("dist_rows") == "owned";
  if (const char* b = std::getenv("TT_DIST_BUCKET_MB")) bucket_bytes_ = static_cast<int64_t>(std::atof(b) * (1 << 20));
}

bool GradSync::sync(bool ok, bool sum_reduced) {
  State& s = run_.state;
  dist::Context& dist = *run_.dist;
  std::vector<at::Tensor>& trainable = run_.trainable;
  const size_t np = trainable.size();
  at::Tensor head = torch::zeros({static_cast<int64_t>(5 + np)}, torch::kDouble);
  auto h = head.accessor<double, 1>();
  const double n = static_cast<double>(s.batch.size);
  h[0] = ok ? s.batch_loss * (sum_reduced ? 1.0 : n) : 0.0;
  h[1] = n;
  h[2] = ok ? 0.0 : 1.0;
  h[3] = interrupt_requested() ? 1.0 : 0.0;
  h[4] = run_.time_for_checkpoint() ? 1.0 : 0.0;
  for (size_t i = 0; i < np; ++i) h[5 + i] = ok && trainable[i].grad().defined() ? 1.0 : 0.0;
  dist.all_reduce_sum(head);
  h = head.accessor<double, 1>();
  interrupted_ = h[3] > 0;
  checkpoint_due_ = h[4] > 0;
  global_examples_ = static_cast<int64_t>(h[1]);
  const bool synced = h[2] == 0;
  if (synced) {
    s.batch_loss = sum_reduced ? h[0] : h[0] / h[1];
    const double share = sum_reduced ? 1.0 : n / h[1];
    std::vector<at::Tensor> grads;
    std::vector<size_t> which;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < np; ++i) {
      if (h[5 + i] == 0) continue;  // no rank has a gradient for it: it stays without one
      at::Tensor g = trainable[i].grad();
      if (owned_rows_ && g.defined() && g.is_sparse()) {
        // rows of this rank's own documents: no other rank has gradient for them
        if (share != 1.0) trainable[i].mutable_grad() = g * share;
        owned_row_params_.insert(i);
        continue;
      }
      if (!g.defined()) g = torch::zeros_like(trainable[i]);
      else if (g.is_sparse()) g = g.to_dense();
      else if (!g.is_contiguous()) g = g.contiguous();
      if (share != 1.0) g.mul_(share);
      grads.push_back(g);
      which.push_back(i);
    }
    if (s.gradient_sync) dist.all_reduce_sum_bucketed(grads, bucket_bytes_);  // else the optimizer's (zero1)
    for (size_t j = 0; j < which.size(); ++j) trainable[which[j]].mutable_grad() = grads[j];
  } else {
    if (ok) log().warn("step {}: another rank dropped its part of the batch; every rank skips this step", s.step + 1);
    run_.zero_grads();
  }
  const double comm = dist.take_comm_seconds();
  run_.record.comm_times.push_back(comm);
  s.last_step.comm_seconds = comm;
  return synced;
}

void GradSync::agree_on_stop() {
  State& s = run_.state;
  if (!run_.dist->any(s.stop)) return;
  std::string by;
  for (const auto& name : run_.dist->all_gather_strings(run_.host.stopped_by()))
    if (by.empty()) by = name;
  if (!s.stop)
    log().info("step {}: {} on another rank set state.stop; every rank stops", s.step,
               by.empty() ? std::string("tt") : "plugin '" + by + "'");
  s.stop = true;
  if (!by.empty()) run_.host.set_stopped_by(by);
}

void GradSync::broadcast_model() {
  // Rank 0's weights go to tensors of the same shapes, or Gloo aborts the process: a model made
  // from data of another size (the topic model has a row per document) is refused first.
  const auto shape_of = [](const at::Tensor& t) {
    std::ostringstream o;
    o << t.sizes();
    return o.str();
  };
  std::string shapes;
  for (const auto& p : run_.state.model->named_parameters()) shapes += p.key() + " " + shape_of(p.value()) + "\n";
  for (const auto& b : run_.state.model->named_buffers()) shapes += b.key() + " " + shape_of(b.value()) + "\n";
  run_.dist->check_same("models' parameter shapes", shapes,
                        "every rank must build the same model from the same data (a data path relative to each rank's "
                        "working directory, or another file on another machine, gives a model of another size)");
  std::vector<at::Tensor> ts;
  for (const auto& t : run_.state.model->parameters()) ts.push_back(t);
  for (const auto& t : run_.state.model->buffers()) ts.push_back(t);
  run_.dist->broadcast(ts, 0);
  run_.dist->take_comm_seconds();
}

void GradSync::assemble_owned_rows() {
  torch::NoGradGuard no_grad;
  const int64_t w = run_.dist->world_size();
  for (size_t i : owned_row_params_) {
    at::Tensor& param = run_.trainable[i];
    const int64_t n = param.size(0);
    at::Tensor all = run_.dist->all_gather(param.detach()).view({w, n, -1});
    at::Tensor rows = torch::arange(n, torch::kLong);
    param.detach().view({n, -1}).copy_(all.index({rows.remainder(w), rows}));
  }
  run_.dist->take_comm_seconds();
}

void GradSync::gather_replica_hashes() {
  std::vector<at::Tensor> ps;
  for (const auto& t : run_.state.model->parameters()) ps.push_back(t);
  auto& hashes = run_.record.replica_hashes;
  hashes = run_.dist->all_gather_strings(dist::hash_tensors(ps));
  for (const auto& h : hashes)
    if (h != hashes[0])
      log().warn("parameters differ across ranks at the end (hashes {} on rank 0, {} elsewhere)", hashes[0], h);
}

}  // namespace tt
