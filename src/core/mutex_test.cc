#include "core/mutex.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "stoker/cores.h"

namespace stoker::core {
namespace {

// A queue of numbers handed from producers to one consumer through a Mutex and a CondVar.
struct Handoff {
  Mutex mutex;
  CondVar changed;
  std::vector<int> items GUARDED_BY(mutex);
  int producers_left GUARDED_BY(mutex) = 0;
};

TEST(Mutex, ProducersAndAConsumerLoseNothing) {
  constexpr int kProducers = 4, kItems = 2000;
  Handoff handoff;
  {
    MutexLock lock(&handoff.mutex);
    handoff.producers_left = kProducers;
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&handoff, p] {
      for (int i = 0; i < kItems; ++i) {
        MutexLock lock(&handoff.mutex);
        handoff.items.push_back(p * kItems + i);
        handoff.changed.signal();
      }
      MutexLock lock(&handoff.mutex);
      --handoff.producers_left;
      handoff.changed.signal();
    });
  }
  int64_t sum = 0, received = 0;
  {
    MutexLock lock(&handoff.mutex);
    while (true) {
      while (handoff.items.empty() && handoff.producers_left > 0)
        handoff.changed.wait(&handoff.mutex);
      for (int item : handoff.items) sum += item;
      received += static_cast<int64_t>(handoff.items.size());
      handoff.items.clear();
      if (handoff.producers_left == 0) break;
      lock.unlock();  // let the producers in
      lock.lock();
    }
  }
  for (auto& producer : producers) producer.join();
  const int64_t n = int64_t{kProducers} * kItems;
  EXPECT_EQ(received, n);
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

TEST(Cores, AtLeastOneAndNoMoreThanTheMachineHas) {
  EXPECT_GE(usable_cores(), 1);
  EXPECT_LE(static_cast<unsigned>(usable_cores()),
            std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace stoker::core
