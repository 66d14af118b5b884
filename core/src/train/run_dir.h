#pragma once
// A run directory's records, written and read again: pipeline.yaml (with the directory the run
// was started in), summary.json, the steps metrics.jsonl says were trained; and the resume's
// checks that read them.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tt {

struct Run;

// The run directory's pipeline.yaml: the resolved pipeline (rank 0), and the directory the run
// was first started in (a resume keeps it).
void write_pipeline_file(Run& run);
// Refuses a directory that holds no pipeline.yaml (a ConfigError naming it), with the run
// directories a user may have meant, the newest last: a run's directory is its name and start
// time (NAME-YYYYMMDD-HHMMSS), so `--resume runs/NAME` names those of runs/ of that name, and a
// directory of runs names the runs in it. A file is refused as one.
void check_run_directory(const std::filesystem::path& run_dir);
// That directory, from a run directory's pipeline.yaml ("" where it does not say).
std::string started_in(const std::filesystem::path& run_dir);

// One process at a time in a run directory: makes it (and its parents) and takes a lock on its
// .tt-lock, held until the descriptor returned is closed. Another process holding it: a
// ConfigError naming it (a second run, resume or --overwrite would mix their checkpoints and
// records). -1 where the directory or its lock file cannot be made (read-only storage): the
// run's own writes then name what failed. A lock of this process's (a Trainer made again in it)
// is taken again (and dropped when either closes its descriptor).
int lock_run_dir(const std::filesystem::path& dir);

// A run directory's summary.json as an object (null when missing or not JSON), and the status
// a summary says the run ended with ("completed", "failed", "interrupted"), or "".
nlohmann::json read_summary(const std::filesystem::path& summary);
std::string summary_status(const nlohmann::json& summary);

// The last step a run's metrics.jsonl has a line of (0: none): what a run killed before it could
// write its summary trained.
int64_t last_logged_step(const std::filesystem::path& metrics);
// The step, loss and examples (0: not logged) of metrics.jsonl's training lines up to `up_to`
// with a finite loss: a resumed run's loss plot starts where the run did.
struct LoggedLoss {
  int64_t step;
  double loss;
  int64_t examples;
};
std::vector<LoggedLoss> logged_losses(const std::filesystem::path& metrics, int64_t up_to);
// The (step, val_loss) of metrics.jsonl's evaluation lines up to `up_to`: the validation points
// of a resumed run's loss plot from before the resume.
std::vector<std::pair<int64_t, double>> logged_val_losses(const std::filesystem::path& metrics, int64_t up_to);

// For a resume's refusal of its data: " (the run was started in DIR, ...)" where a relative path
// among the data's options is missing here and found where the run started; else "".
std::string moved_data_hint(const Run& run);

// A resume from a checkpoint of an unfinished run (`status`: its summary's) that would end before
// the checkpoint's step is refused (it was marked completed, its pipeline.yaml saying fewer steps
// than it trained); a completed run's resume trains nothing whatever it asks.
void check_resume_length(const Run& run, const std::string& status);

// After an interrupt's checkpoint: "Continue with: tt-run [--nproc N] --resume DIR ...", or, for
// trainer.dist_rows: owned (whose checkpoints cannot be resumed), the new run from its weights.
std::string how_to_continue(const Run& run);
// How the run was launched, for a command line said to the user: "tt-run", or "tt-run --nproc N"
// for a data-parallel run (a run of one process would train with another global batch); and
// " (or N workers launched as before, with ARGS)" for the latter, "" for the former.
std::string launch_command(const Run& run);
std::string launched_as_before(const Run& run, const std::string& args);

}  // namespace tt
