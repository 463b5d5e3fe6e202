#include "server/lifecycle/freed_signal.h"

#include <memory>

#include "gtest/gtest.h"

namespace castserve {
namespace {

// Records, from its destructor, whether `watch` had expired yet.
class Watched {
 public:
  Watched(const std::weak_ptr<const void>* watch, bool* expired)
      : watch_(watch), expired_(expired) {}
  ~Watched() { *expired_ = watch_->expired(); }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  const std::weak_ptr<const void>* const watch_;
  bool* const expired_;
};

TEST(FreedSignalTest, ExpiresOnlyAfterTheDestructorReturned) {
  std::weak_ptr<const void> watch;
  bool expired_while_destroyed = true;
  std::shared_ptr<Watched> signalled = SignalWhenFreed(
      std::make_shared<Watched>(&watch, &expired_while_destroyed));
  watch = WatchFreed(signalled);
  std::shared_ptr<const void> other_reference = signalled;
  signalled.reset();
  EXPECT_FALSE(watch.expired()) << "another reference holds it";
  other_reference.reset();
  EXPECT_FALSE(expired_while_destroyed);
  EXPECT_TRUE(watch.expired());
}

TEST(FreedSignalTest, APlainPointerExpiresWithItsLastReference) {
  std::weak_ptr<const void> watch;
  bool expired_while_destroyed = false;
  auto plain = std::make_shared<Watched>(&watch, &expired_while_destroyed);
  watch = WatchFreed(plain);
  plain.reset();
  EXPECT_TRUE(expired_while_destroyed) << "what SignalWhenFreed is for";
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(SignalWhenFreed(std::shared_ptr<Watched>()), nullptr);
}

}  // namespace
}  // namespace castserve
