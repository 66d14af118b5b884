#include "tt/event.h"

namespace tt {

const char* to_string(Event e) {
  switch (e) {
    case Event::INIT: return "INIT";
    case Event::OPTIMIZER: return "OPTIMIZER";
    case Event::FIT_START: return "FIT_START";
    case Event::EPOCH_START: return "EPOCH_START";
    case Event::BATCH_START: return "BATCH_START";
    case Event::BEFORE_FORWARD: return "BEFORE_FORWARD";
    case Event::AFTER_FORWARD: return "AFTER_FORWARD";
    case Event::AFTER_LOSS: return "AFTER_LOSS";
    case Event::BEFORE_BACKWARD: return "BEFORE_BACKWARD";
    case Event::AFTER_BACKWARD: return "AFTER_BACKWARD";
    case Event::BEFORE_STEP: return "BEFORE_STEP";
    case Event::AFTER_STEP: return "AFTER_STEP";
    case Event::BATCH_END: return "BATCH_END";
    case Event::BEFORE_EVAL: return "BEFORE_EVAL";
    case Event::EVAL: return "EVAL";
    case Event::AFTER_EVAL: return "AFTER_EVAL";
    case Event::CHECKPOINT: return "CHECKPOINT";
    case Event::EPOCH_END: return "EPOCH_END";
    case Event::FIT_END: return "FIT_END";
    case Event::OOM: return "OOM";
  }
  return "?";
}

bool runs_in_reverse(Event e) {
  switch (e) {
    case Event::AFTER_FORWARD:
    case Event::AFTER_LOSS:
    case Event::AFTER_BACKWARD:
    case Event::AFTER_STEP:
    case Event::BATCH_END:
    case Event::AFTER_EVAL:
    case Event::EPOCH_END:
    case Event::FIT_END: return true;
    default: return false;
  }
}

}  // namespace tt
