#include "server/lifecycle/model_manager.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "casting/footprint.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "platform/test_util/manual_executor.h"
#include "server/lifecycle/model_repository.h"
#include "server/lifecycle/served_model.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

// A served model that only holds bytes: footprint() reports them, requests
// are counted as pending until the test says otherwise.
class FakeServedModel : public ServedModel {
 public:
  FakeServedModel(inference::ModelConfig config, int64_t bytes,
                  std::atomic<int>* live)
      : config_(std::move(config)), bytes_(bytes), live_(live) {
    ++*live_;
  }
  ~FakeServedModel() override { --*live_; }

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return specs_; }
  const std::vector<TensorSpec>& outputs() const override { return specs_; }
  void Infer(InferenceCall, std::function<void(absl::Status)> done) override {
    done(absl::OkStatus());
  }
  int64_t pending_requests() const override { return pending_; }
  ServedModelStatistics statistics() const override { return {}; }
  casting::Footprint footprint() const override {
    casting::Footprint footprint;
    footprint.AddResident("f32", bytes_);
    return footprint;
  }
  int64_t tracked_bytes() const override { return bytes_ / 2; }

  void set_pending(int pending) { pending_ = pending; }

 private:
  const inference::ModelConfig config_;
  const std::vector<TensorSpec> specs_;
  const int64_t bytes_;
  std::atomic<int>* const live_;
  std::atomic<int> pending_{0};
};

// Makes FakeServedModels of the size in the config's "bytes" parameter;
// fails for configs with a "fail" parameter. While gated, Create blocks.
class FakeFactory : public ServedModelFactory {
 public:
  absl::StatusOr<std::shared_ptr<ServedModel>> Create(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation) override {
    ++creates_;
    {
      absl::MutexLock lock(&mu_);
      ++waiting_;
      // A real load polls its cancellation between steps; so does this one.
      while (!mu_.AwaitWithTimeout(
          absl::Condition(
              +[](bool* gated) { return !*gated; }, &gated_),
          absl::Milliseconds(1))) {
        if (cancellation != nullptr && cancellation->cancelled()) {
          --waiting_;
          return absl::CancelledError(cancellation->reason());
        }
      }
      --waiting_;
    }
    if (config.parameters().count("fail") > 0) {
      return absl::FailedPreconditionError(
          config.parameters().at("fail").string_value());
    }
    const auto bytes = config.parameters().find("bytes");
    return std::make_shared<FakeServedModel>(
        config,
        bytes == config.parameters().end()
            ? 100
            : std::atoll(bytes->second.string_value().c_str()),
        &live_models_);
  }

  void Gate() {
    absl::MutexLock lock(&mu_);
    gated_ = true;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    gated_ = false;
  }
  void AwaitWaiting(int count) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waiting_ >= count;
    };
    mu_.Await(absl::Condition(&reached));
  }
  int creates() const { return creates_; }
  int live_models() const { return live_models_; }

 private:
  absl::Mutex mu_;
  bool gated_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> creates_{0};
  std::atomic<int> live_models_{0};
};

class Fixture {
 public:
  explicit Fixture(int64_t budget_bytes = 0) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    static std::atomic<int> serial{0};
    root_ = fs::path(tmp != nullptr ? tmp : "/tmp") /
            absl::StrCat("manager_repo_", ::getpid(), "_", serial++);
    fs::remove_all(root_);
    fs::create_directories(root_);
    budget_bytes_ = budget_bytes;
  }
  ~Fixture() { fs::remove_all(root_); }

  void AddModel(const std::string& name, const std::string& config_text) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "config.pbtxt") << config_text;
  }

  // Made on first use, after the test added its models. Not thread-safe:
  // call it once before starting threads that use it.
  ModelManager& manager() {
    if (manager_ == nullptr) {
      repository_ = *ModelRepository::Open(root_.string());
      manager_ =
          *ModelManager::Create({repository_.get(), &factory_, budget_bytes_,
                                 nullptr, executor_, clock_});
    }
    return *manager_;
  }
  // Before manager(): the executor the manager's background loads run on.
  void set_executor(platform::Executor* executor) { executor_ = executor; }
  // Before manager(): the clock last-use times and deadlines read.
  void set_clock(platform::Clock* clock) { clock_ = clock; }
  FakeFactory& factory() { return factory_; }

  ModelState StateOf(const std::string& name) {
    absl::StatusOr<ModelStatus> status = manager().Status(name);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->state : ModelState::kUnavailable;
  }
  std::string ReasonOf(const std::string& name) {
    absl::StatusOr<ModelStatus> status = manager().Status(name);
    return status.ok() ? status->reason : "";
  }

 private:
  fs::path root_;
  int64_t budget_bytes_ = 0;
  platform::Executor* executor_ = nullptr;
  platform::Clock* clock_ = &platform::Clock::Real();
  FakeFactory factory_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ModelManager> manager_;
};

std::string Config(int64_t bytes, bool first_request = false) {
  return absl::StrCat(
      first_request ? "load_policy: LOAD_POLICY_FIRST_REQUEST\n" : "",
      "parameters { key: \"bytes\" value { string_value: \"", bytes,
      "\" } }\n");
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

inference::ModelConfig ConfigWithParameter(const std::string& key,
                                           const std::string& value) {
  inference::ModelConfig config;
  (*config.mutable_parameters())[key].set_string_value(value);
  return config;
}

TEST(ModelManagerTest, StartupLoadsStartupModelsAndExplainsTheOthers) {
  Fixture fixture;
  fixture.AddModel("eager", Config(100));
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.AddModel("broken", "max_batch_size: \"eight\"\n");
  fixture.manager().LoadStartupModels();

  const std::vector<ModelStatus> index = fixture.manager().Index();
  ASSERT_EQ(index.size(), 3u);
  EXPECT_EQ(index[0].name, "broken");
  EXPECT_EQ(index[0].state, ModelState::kUnavailable);
  EXPECT_NE(index[0].reason.find("config.pbtxt"), std::string::npos)
      << index[0].reason;
  EXPECT_EQ(index[1].name, "eager");
  EXPECT_EQ(index[1].state, ModelState::kReady);
  EXPECT_EQ(index[1].reason, "");
  EXPECT_EQ(index[2].name, "lazy");
  EXPECT_EQ(index[2].state, ModelState::kUnavailable);
  EXPECT_NE(index[2].reason.find("first request"), std::string::npos);
  EXPECT_EQ(fixture.factory().creates(), 1);
  EXPECT_EQ(fixture.manager().GetReady("broken", "", Soon()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ModelManagerTest, FirstRequestLoadsTheModel) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.factory().creates(), 0);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      fixture.manager().GetReady("lazy", "1", Soon());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kReady);
  EXPECT_EQ(fixture.manager().ReadyModels().size(), 1u);
}

TEST(ModelManagerTest, FirstRequestWaitIsBoundedByTheDeadline) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.factory().Gate();
  const absl::Time start = absl::Now();
  EXPECT_EQ(fixture.manager()
                .GetReady("lazy", "", start + absl::Milliseconds(50))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kLoading);
  fixture.factory().Open();
  EXPECT_TRUE(fixture.manager().GetReady("lazy", "", Soon()).ok());
  EXPECT_EQ(fixture.factory().creates(), 1);  // The load went on.
}

TEST(ModelManagerTest, FirstRequestLoadRunsOnTheExecutor) {
  platform::test_util::ManualExecutor executor;
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.set_executor(&executor);
  // The load is scheduled, not run by the caller: the wait times out.
  EXPECT_EQ(fixture.manager()
                .GetReady("lazy", "", absl::Now() + absl::Milliseconds(20))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(executor.pending(), 1);
  EXPECT_EQ(fixture.factory().creates(), 0);
  EXPECT_EQ(executor.RunPending(), 1);
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kReady);
  EXPECT_TRUE(fixture.manager().GetReady("lazy", "", Soon()).ok());
  EXPECT_EQ(executor.pending(), 0);  // READY: nothing more to schedule.
}

TEST(ModelManagerTest, ConcurrentCallersShareOneLoad) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.factory().Gate();
  ModelManager& manager = fixture.manager();
  std::vector<std::shared_ptr<ServedModel>> got(8);
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] {
      absl::StatusOr<std::shared_ptr<ServedModel>> model =
          manager.GetReady("lazy", "", Soon());
      if (model.ok()) got[i] = *model;
    });
  }
  fixture.factory().AwaitWaiting(1);
  absl::SleepFor(absl::Milliseconds(20));
  fixture.factory().Open();
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(fixture.factory().creates(), 1);
  for (const auto& model : got) {
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model, got[0]);
  }
}

TEST(ModelManagerTest, ReloadSwapsInTheNewModelOnlyOnceReady) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::shared_ptr<ServedModel> old_model =
      *fixture.manager().GetReady("m", "", Soon());

  fixture.factory().Gate();
  absl::Status reloaded;
  std::thread reload([&] {
    reloaded = fixture.manager().Load("m", ConfigWithParameter("bytes", "7"));
  });
  fixture.factory().AwaitWaiting(1);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
  EXPECT_EQ(*fixture.manager().GetReady("m", "", Soon()), old_model);
  fixture.factory().Open();
  reload.join();
  ASSERT_TRUE(reloaded.ok()) << reloaded;
  std::shared_ptr<ServedModel> new_model =
      *fixture.manager().GetReady("m", "", Soon());
  EXPECT_NE(new_model, old_model);
  EXPECT_EQ(new_model->footprint().owned_bytes(), 7);
  old_model.reset();
  EXPECT_EQ(fixture.factory().live_models(), 1);  // The old one is freed.
}

TEST(ModelManagerTest, UnloadCancelsALoadStillRunning) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.factory().Gate();  // The load never finishes on its own.
  absl::Status loaded;
  std::thread load([&] { loaded = fixture.manager().Load("m", std::nullopt); });
  fixture.factory().AwaitWaiting(1);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kLoading);
  EXPECT_TRUE(fixture.manager().Unload("m").ok());
  load.join();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  EXPECT_EQ(loaded.message(), "the model was unloaded while it was loading");
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "unloaded");
  EXPECT_EQ(fixture.factory().live_models(), 0);
  // The cancellation belonged to that load only.
  fixture.factory().Open();
  EXPECT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
}

TEST(ModelManagerTest, CancelAllStopsLoadsForGood) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.AddModel("n", Config(100));
  fixture.factory().Gate();
  absl::Status loaded;
  std::thread load([&] { loaded = fixture.manager().Load("m", std::nullopt); });
  fixture.factory().AwaitWaiting(1);
  fixture.manager().CancelAll("the daemon is shutting down");
  load.join();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "the daemon is shutting down");
  // Later loads are cancelled too.
  EXPECT_EQ(fixture.manager().Load("n", std::nullopt).code(),
            absl::StatusCode::kCancelled);
}

TEST(ModelManagerTest, FailedReloadKeepsTheLoadedModel) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::shared_ptr<ServedModel> old_model =
      *fixture.manager().GetReady("m", "", Soon());
  const absl::Status reloaded =
      fixture.manager().Load("m", ConfigWithParameter("fail", "bad weights"));
  EXPECT_EQ(reloaded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
  EXPECT_EQ(*fixture.manager().GetReady("m", "", Soon()), old_model);
}

TEST(ModelManagerTest, FailedLoadIsUnavailableWithItsReason) {
  Fixture fixture;
  fixture.AddModel(
      "m", "parameters { key: \"fail\" value { string_value: \"no ckpt\" } }");
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "no ckpt");
  const absl::Status status =
      fixture.manager().GetReady("m", "", Soon()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("no ckpt"), absl::string_view::npos);
}

TEST(ModelManagerTest, UnloadWaitsForInFlightRequestsAndFreesTheModel) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::shared_ptr<ServedModel> model =
      *fixture.manager().GetReady("m", "", Soon());
  auto* fake = static_cast<FakeServedModel*>(model.get());
  fake->set_pending(1);
  std::weak_ptr<ServedModel> watch = model;
  model.reset();

  absl::Notification unloaded;
  std::thread unload([&] {
    EXPECT_TRUE(fixture.manager().Unload("m").ok());
    unloaded.Notify();
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(unloaded.HasBeenNotified());
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnloading);
  EXPECT_EQ(fixture.manager().GetReady("m", "", absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  fake->set_pending(0);
  unload.join();
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "unloaded");
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(fixture.factory().live_models(), 0);
  EXPECT_EQ(fixture.manager().GetReady("m", "", Soon()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  EXPECT_TRUE(fixture.manager().GetReady("m", "", Soon()).ok());
}

TEST(ModelManagerTest, NamesThatCouldLeaveTheRepositoryAreInvalid) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  for (const std::string& name :
       {std::string("a/b"), std::string(".."), std::string("../m"),
        std::string("m\0x", 3), std::string(""), std::string(".hidden")}) {
    EXPECT_EQ(fixture.manager().Load(name, std::nullopt).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(fixture.manager().Unload(name).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(fixture.manager().GetReady(name, "", Soon()).status().code(),
              absl::StatusCode::kNotFound)
        << name;
  }
  EXPECT_EQ(fixture.factory().creates(), 0);
}

TEST(ModelManagerTest, UnknownModelsAndVersionsAreNotFound) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.manager().GetReady("nope", "", Soon()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().GetReady("m", "2", Soon()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Load("nope", std::nullopt).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Status("nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Unload("nope").code(),
            absl::StatusCode::kNotFound);
}

TEST(ModelManagerTest, EvictsTheLeastRecentlyUsedIdleModelOverBudget) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  for (const char* name : {"a", "b", "c"}) fixture.AddModel(name, Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  clock.Advance(absl::Milliseconds(2));
  ASSERT_TRUE(fixture.manager().GetReady("a", "", Soon()).ok());  // b is LRU.
  ASSERT_TRUE(fixture.manager().Load("c", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kUnavailable);
  EXPECT_NE(fixture.ReasonOf("b").find("memory budget"), std::string::npos);
  EXPECT_EQ(fixture.StateOf("c"), ModelState::kReady);
  EXPECT_EQ(fixture.factory().live_models(), 2);

  // An evicted model comes back on its next request, evicting the LRU (a).
  ASSERT_TRUE(fixture.manager().GetReady("b", "", Soon()).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.StateOf("c"), ModelState::kReady);
}

TEST(ModelManagerTest, BusyModelsAreNotEvictedAndTheLoadFails) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  std::shared_ptr<ServedModel> a = *fixture.manager().GetReady("a", "", Soon());
  static_cast<FakeServedModel*>(a.get())->set_pending(1);

  const absl::Status loaded = fixture.manager().Load("b", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kUnavailable);
  EXPECT_NE(fixture.ReasonOf("b").find("memory budget"), std::string::npos);
  a.reset();
  EXPECT_EQ(fixture.factory().live_models(), 1);  // b was freed.
}

TEST(ModelManagerTest, ModelLargerThanTheBudgetFailsAlone) {
  Fixture fixture(/*budget_bytes=*/250);
  fixture.AddModel("huge", Config(1000));
  EXPECT_EQ(fixture.manager().Load("huge", std::nullopt).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fixture.factory().live_models(), 0);
}

TEST(ModelManagerTest, ModelThatCannotFitAloneEvictsNothing) {
  Fixture fixture(/*budget_bytes=*/250);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("huge", Config(1000));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  const absl::Status loaded = fixture.manager().Load("huge", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loaded.message().find("alone needs"), std::string::npos) << loaded;
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady) << "a was not evicted";
  EXPECT_EQ(fixture.factory().live_models(), 1);
}

TEST(ModelManagerTest, StateNamesAreTritons) {
  EXPECT_STREQ(ModelStateName(ModelState::kUnavailable), "UNAVAILABLE");
  EXPECT_STREQ(ModelStateName(ModelState::kLoading), "LOADING");
  EXPECT_STREQ(ModelStateName(ModelState::kReady), "READY");
  EXPECT_STREQ(ModelStateName(ModelState::kUnloading), "UNLOADING");
}

}  // namespace
}  // namespace castserve
