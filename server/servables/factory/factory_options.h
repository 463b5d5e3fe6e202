// FactoryOptions: the daemon's settings (server flags) for every model the
// factory loads, and the limits a config is checked against before anything
// is allocated or started.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_FACTORY_OPTIONS_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_FACTORY_OPTIONS_H_

#include <cstdint>

#include "absl/time/time.h"
#include "platform/clock.h"

namespace castserve {

// The daemon's settings for every model it loads (server flags).
struct FactoryOptions {
  // Threads per forward for models without INTRA_OP_THREAD_COUNT; 0: the
  // hardware threads divided by the model's instance count (at least 1).
  int intra_op_threads = 0;
  // LibTorch's inter-op pool; 0 keeps its default.
  int inter_op_threads = 0;
  // The model folder, its checkpoint folder and files and its warmup data
  // files may be symlinks that lead outside the repository (the folder
  // that holds the model folder); see RepositoryBoundary.
  bool allow_symlinks_outside_repository = false;

  // Limits on what a config may ask for, checked before anything is
  // allocated or started: a config past one fails to load with the limit
  // named.
  // The inputs of one warmup request together (as --max-message-bytes
  // bounds a request).
  int64_t max_warmup_request_bytes = int64_t{256} << 20;
  // Instances (threads running forwards) of one model.
  int max_instances = 16;
  // Runs of one warmup entry (`count`).
  int64_t max_warmup_count = 1000;
  // All of one model's warmups together; past it the load fails with
  // DEADLINE_EXCEEDED.
  absl::Duration max_warmup_duration = absl::Minutes(5);
  // What the warmups' time limit is measured with (not owned).
  platform::Clock* clock = &platform::Clock::Real();
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_FACTORY_OPTIONS_H_
