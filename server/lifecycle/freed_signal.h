// When an object shared through std::shared_ptr is really gone. A weak_ptr
// expires as soon as the last reference goes, before the object's destructor
// has run: the memory budget, counting a model (or what a demotion took out
// of one) until it is freed, would let that memory go too early, while a
// large model's destructor may still be returning gigabytes. A pointer made
// by SignalWhenFreed expires its WatchFreed only once the destructor has
// returned.
//
// Thread-safe as std::shared_ptr is.
#ifndef CASTSERVE_SERVER_LIFECYCLE_FREED_SIGNAL_H_
#define CASTSERVE_SERVER_LIFECYCLE_FREED_SIGNAL_H_

#include <memory>
#include <utility>

namespace castserve {

// The deleter of SignalWhenFreed's pointers: releases the object's
// reference, then the token WatchFreed watches.
struct FreedSignal {
  std::shared_ptr<const void> object;
  std::shared_ptr<const void> token;
  void operator()(const void*) {
    object.reset();
    token.reset();
  }
};

// `object` as a pointer with a control block of its own (null for null):
// every reference to the object must come from the returned pointer.
template <typename T>
std::shared_ptr<T> SignalWhenFreed(std::shared_ptr<T> object) {
  if (object == nullptr) return nullptr;
  T* const raw = object.get();
  return std::shared_ptr<T>(
      raw, FreedSignal{std::move(object), std::make_shared<char>(0)});
}

// Expires once the object `owner` points to is freed: after its destructor
// returned for a pointer SignalWhenFreed made, with the last reference for
// any other.
inline std::weak_ptr<const void> WatchFreed(
    const std::shared_ptr<const void>& owner) {
  if (const FreedSignal* signal = std::get_deleter<FreedSignal>(owner)) {
    return signal->token;
  }
  return owner;
}

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_FREED_SIGNAL_H_
