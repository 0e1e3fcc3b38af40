// Tests for slm/core/parallel.hpp: partitioning, executors, cancellation, thread_pool.
// Every test is deterministic: nothing depends on timing or on which thread runs what.
#include "slm/core/parallel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <signal.h>
#include <time.h>
#endif

namespace {

using slm::errc;
using slm::index_range;

// Runs tasks inline in order but claims a given concurrency, so a partition for N
// threads can be compared with what a real pool of N threads does.
struct fixed_serial {
  std::size_t n = 1;
  std::size_t concurrency() const noexcept { return n; }
  void run(std::size_t n_tasks, slm::task_ref fn) const noexcept {
    for (std::size_t i = 0; i < n_tasks; ++i) fn(i);
  }
};

// A host's own pool: starts fresh threads per run and records that it was used.
struct host_pool {
  int runs = 0;
  std::size_t concurrency() const noexcept { return 3; }
  void run(std::size_t n_tasks, slm::task_ref fn) noexcept {
    ++runs;
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < n_tasks; ++i) threads.emplace_back([fn, i] { fn(i); });
    for (auto& t : threads) t.join();
  }
};

slm::thread_pool make_pool(std::size_t n) {
  auto r = slm::thread_pool::create(n);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return std::move(r).value();
}

// Chunk boundaries an executor produced, indexed by chunk (found from lo).
template <class E>
std::vector<index_range> observed_chunks(E& ex, std::size_t begin, std::size_t end, std::size_t grain) {
  const auto p = slm::partition(begin, end, ex.concurrency(), grain);
  std::vector<index_range> seen(p.count);
  const slm::status st = slm::parallel_for(ex, begin, end, grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t c = 0; c < p.count; ++c)
      if (p.chunk(c).begin == lo) seen[c] = {lo, hi};  // each chunk writes its own slot
  });
  EXPECT_TRUE(st.ok());
  return seen;
}

TEST(Partition, CoversRangeContiguouslyWithoutOverlap) {
  for (std::size_t begin : {0u, 5u}) {
    for (std::size_t n : {0u, 1u, 2u, 3u, 7u, 16u, 100u, 1001u}) {
      for (std::size_t chunks : {0u, 1u, 2u, 3u, 8u, 64u}) {
        for (std::size_t grain : {0u, 1u, 4u, 50u, 2000u}) {
          const auto p = slm::partition(begin, begin + n, chunks, grain);
          SCOPED_TRACE(testing::Message() << "n=" << n << " chunks=" << chunks << " grain=" << grain);
          if (n == 0) {
            EXPECT_EQ(p.count, 0u);
            continue;
          }
          ASSERT_GE(p.count, 1u);
          EXPECT_LE(p.count, chunks == 0 ? 1u : chunks);
          std::size_t at = begin;
          for (std::size_t c = 0; c < p.count; ++c) {
            const index_range r = p.chunk(c);
            EXPECT_EQ(r.begin, at);
            EXPECT_GT(r.size(), 0u);
            if (p.count > 1) {
              EXPECT_GE(r.size(), grain);
            }
            EXPECT_LE(r.size(), n / p.count + 1);  // balanced
            at = r.end;
          }
          EXPECT_EQ(at, begin + n);
          EXPECT_EQ(p.chunk(p.count), (index_range{begin + n, begin + n}));
        }
      }
    }
  }
}

TEST(Partition, IsAPureFunction) {
  static_assert(slm::partition(0, 10, 3).count == 3);
  static_assert(slm::partition(0, 10, 3).chunk(0) == index_range{0, 4});
  static_assert(slm::partition(0, 10, 3).chunk(2) == index_range{7, 10});
  static_assert(slm::partition(0, 10, 8, 4).count == 2);   // grain caps the count
  static_assert(slm::partition(0, 3, 8, 4).count == 1);    // shorter than grain: one chunk
  static_assert(slm::partition(7, 3, 8).count == 0);       // begin > end is empty
  const auto a = slm::partition(3, 12345, 7, 10);
  const auto b = slm::partition(3, 12345, 7, 10);
  for (std::size_t c = 0; c < a.count; ++c) EXPECT_EQ(a.chunk(c), b.chunk(c));
}

TEST(ParallelFor, VisitsEachIndexExactlyOnce) {
  for (std::size_t threads : {1u, 2u, 3u, 4u, 8u}) {
    slm::thread_pool pool = make_pool(threads);
    for (std::size_t n : {0u, 1u, 2u, 3u, 5u, 7u, 8u, 9u, 64u, 1000u}) {
      for (std::size_t grain : {0u, 1u, 3u, 16u, 100u}) {
        SCOPED_TRACE(testing::Message() << "threads=" << threads << " n=" << n << " grain=" << grain);
        const std::size_t begin = 11;
        auto hits = std::make_unique<std::atomic<int>[]>(n + 1);
        std::atomic<std::size_t> calls{0};
        const slm::status st = slm::parallel_for(pool, begin, begin + n, grain, [&](std::size_t lo, std::size_t hi) {
          calls.fetch_add(1);
          for (std::size_t i = lo; i < hi; ++i) hits[i - begin].fetch_add(1);
        });
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(calls.load(), slm::partition(begin, begin + n, threads, grain).count);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
      }
    }
  }
}

TEST(ParallelFor, EndBeforeBeginIsAnError) {
  slm::serial_executor ex;
  int calls = 0;
  const slm::status st = slm::parallel_for(ex, 5, 2, [&](std::size_t, std::size_t) { ++calls; });
  EXPECT_EQ(st.code(), errc::invalid_argument);
  EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, PoolAndSerialAgreeOnChunkBoundaries) {
  for (std::size_t threads : {1u, 2u, 3u, 5u}) {
    slm::thread_pool pool = make_pool(threads);
    fixed_serial serial{threads};
    for (std::size_t n : {1u, 4u, 33u, 1000u}) {
      for (std::size_t grain : {1u, 7u}) {
        const auto expect = observed_chunks(serial, 2, 2 + n, grain);
        EXPECT_EQ(observed_chunks(pool, 2, 2 + n, grain), expect);
        for (std::size_t c = 0; c < expect.size(); ++c)
          EXPECT_EQ(expect[c], slm::partition(2, 2 + n, threads, grain).chunk(c));
      }
    }
  }
}

// Per-chunk partial sums reduced in chunk order: the result may differ from a serial
// sum, but never from one run to the next.
template <class E>
float chunked_sum(E& ex, const std::vector<float>& v) {
  const auto p = slm::partition(0, v.size(), ex.concurrency());
  std::vector<float> partial(p.count, 0.0f);
  const slm::status st = slm::parallel_for_chunks(ex, p.count, [&](std::size_t c) {
    const index_range r = p.chunk(c);
    float s = 0.0f;
    for (std::size_t i = r.begin; i < r.end; ++i) s += v[i];
    partial[c] = s;
  });
  EXPECT_TRUE(st.ok());
  float total = 0.0f;
  for (float s : partial) total += s;
  return total;
}

TEST(ParallelFor, FloatReductionIsBitIdenticalAcrossRuns) {
  std::vector<float> v(100003);
  std::uint32_t x = 12345;
  for (float& f : v) {  // values of mixed magnitude so summation order matters
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (x & 1 ? 1e-3f : 1.0f) * (x & 2 ? -1.0f : 1.0f);
  }
  slm::thread_pool pool = make_pool(4);
  fixed_serial serial{4};
  const std::uint32_t expect = std::bit_cast<std::uint32_t>(chunked_sum(serial, v));
  for (int run = 0; run < 50; ++run)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(chunked_sum(pool, v)), expect) << "run " << run;
}

TEST(Cancellation, BeforeTheCallRunsNothing) {
  slm::cancellation cancel;
  cancel.cancel();
  EXPECT_TRUE(cancel.cancelled());
  EXPECT_EQ(slm::check_cancelled(&cancel).code(), errc::cancelled);
  EXPECT_TRUE(slm::check_cancelled(nullptr).ok());
  slm::thread_pool pool = make_pool(3);
  std::atomic<int> calls{0};
  auto body = [&](std::size_t, std::size_t) { calls.fetch_add(1); };
  EXPECT_EQ(slm::parallel_for(pool, 0, 1000, body, &cancel).code(), errc::cancelled);
  EXPECT_EQ(slm::parallel_for(pool, 0, 1, body, &cancel).code(), errc::cancelled);
  EXPECT_EQ(slm::parallel_for_chunks(pool, 10, [&](std::size_t) { calls.fetch_add(1); }, &cancel).code(),
            errc::cancelled);
  EXPECT_EQ(calls.load(), 0);
  cancel.reset();
  EXPECT_FALSE(cancel.cancelled());
  EXPECT_TRUE(slm::parallel_for(pool, 0, 1000, body, &cancel).ok());
  EXPECT_EQ(calls.load(), 3);
}

// A cancellation says so: a layer adds its name ("mamba3: ...") to what these return,
// and an empty message left "mamba3: " (issue 18).
TEST(Cancellation, MessageSaysCancelledAlsoWithContext) {
  slm::cancellation cancel;
  cancel.cancel();
  slm::thread_pool pool = make_pool(2);
  const slm::status sts[] = {
      slm::check_cancelled(&cancel),
      slm::parallel_for(pool, 0, 1000, [](std::size_t, std::size_t) {}, &cancel),
      slm::parallel_for_chunks(pool, 10, [](std::size_t) {}, &cancel),
  };
  for (const slm::status& st : sts) {
    EXPECT_EQ(st.code(), errc::cancelled);
    EXPECT_NE(st.message().find("cancelled"), std::string::npos) << st.message();
    EXPECT_EQ(slm::status(st).with_context("mamba3").message().rfind("mamba3: cancelled", 0), 0u);
  }
  // Whatever code builds a bare error, the context never ends in ": ".
  EXPECT_EQ(slm::status(errc::cancelled, std::string()).with_context("mamba3").message(), "mamba3: cancelled");
}

TEST(Cancellation, FirstChunkCancelsWithConcurrencyOne) {
  slm::thread_pool pool = make_pool(1);
  slm::serial_executor serial;
  for (slm::executor_ref ex : {slm::executor_ref(pool), slm::executor_ref(serial)}) {
    slm::cancellation cancel;
    int executed = 0;
    const slm::status st = slm::parallel_for_chunks(ex, 100, [&](std::size_t) {
      ++executed;
      cancel.cancel();
    }, &cancel);
    EXPECT_EQ(st.code(), errc::cancelled);
    EXPECT_EQ(executed, 1);
  }
}

// Other threads block inside their chunk until the token fires, so none can race
// through all chunks first: at most one chunk per thread runs.
TEST(Cancellation, FromAnotherThreadStopsBeforeAllChunks) {
  constexpr std::size_t threads = 4, chunks = 1000;
  slm::thread_pool pool = make_pool(threads);
  slm::cancellation cancel;
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started.load()) std::this_thread::yield();
    cancel.cancel();
  });
  std::atomic<std::size_t> executed{0};
  const slm::status st = slm::parallel_for_chunks(pool, chunks, [&](std::size_t) {
    started.store(true);
    while (!cancel.cancelled()) std::this_thread::yield();
    executed.fetch_add(1);
  }, &cancel);
  canceller.join();
  EXPECT_EQ(st.code(), errc::cancelled);
  EXPECT_GE(executed.load(), 1u);
  EXPECT_LE(executed.load(), threads);
}

TEST(ExecutorRef, WrapsAHostPool) {
  host_pool host;
  auto scale = [](slm::executor_ref ex, std::vector<int>& v) {  // non-template code
    return slm::parallel_for(ex, 0, v.size(), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) v[i] *= 2;
    });
  };
  std::vector<int> v(100, 1);
  ASSERT_TRUE(scale(host, v).ok());
  ASSERT_TRUE(scale(slm::executor_ref::from(host), v).ok());
  EXPECT_EQ(host.runs, 2);
  for (int x : v) EXPECT_EQ(x, 4);
  slm::executor_ref ref(host);
  EXPECT_EQ(ref.concurrency(), 3u);
  EXPECT_EQ(observed_chunks(ref, 0, 10, 1), (std::vector<index_range>{{0, 4}, {4, 7}, {7, 10}}));
}

// A pool shared through a const reference runs work (issue 18): run() is const, and an
// executor_ref (so a compute_context) takes a const pool.
TEST(ExecutorRef, TakesAConstPool) {
  static_assert(slm::executor<const slm::thread_pool>);
  static_assert(std::is_constructible_v<slm::executor_ref, const slm::thread_pool&>);
  const slm::thread_pool pool = make_pool(3);
  const slm::thread_pool& shared = pool;
  std::vector<int> v(100, 1);
  auto twice = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) v[i] *= 2;
  };
  ASSERT_TRUE(slm::parallel_for(shared, 0, v.size(), 1, twice).ok());
  slm::executor_ref ref(shared);
  EXPECT_EQ(ref.concurrency(), 3u);
  ASSERT_TRUE(slm::parallel_for(ref, 0, v.size(), 1, twice).ok());
  std::atomic<int> runs{0};
  shared.run(5, [&](std::size_t) { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 5);
  for (int x : v) EXPECT_EQ(x, 4);
}

TEST(FunctionRef, CallsLambdasAndFunctions) {
  int base = 10;
  auto add = [&](int a) { return base + a; };
  slm::function_ref<int(int)> f = add;
  EXPECT_EQ(f(5), 15);
  base = 20;
  EXPECT_EQ(f(5), 25);  // a reference, not a copy
  struct negate {
    static int call(int a) { return -a; }
  };
  slm::function_ref<int(int)> g = negate::call;
  EXPECT_EQ(g(3), -3);
  slm::function_ref<long(int)> h = g;  // converts the result
  EXPECT_EQ(h(4), -4L);
}

TEST(ThreadPool, CreateValidatesArguments) {
  auto zero = slm::thread_pool::create(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.code(), errc::invalid_argument);
  auto huge = slm::thread_pool::create(slm::thread_pool::max_threads + 1);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.code(), errc::out_of_range);
  EXPECT_GE(slm::hardware_threads(), 1u);
  auto one = slm::thread_pool::create(1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->concurrency(), 1u);
}

TEST(ThreadPool, DestroyWithoutRunAndMove) {
  { slm::thread_pool never_run = make_pool(4); }
  slm::thread_pool a = make_pool(3);
  slm::thread_pool b = std::move(a);
  EXPECT_EQ(b.concurrency(), 3u);
  EXPECT_EQ(a.concurrency(), 1u);  // NOLINT(bugprone-use-after-move): moved-from runs inline
  std::atomic<int> sum{0};
  a.run(4, [&](std::size_t i) { sum.fetch_add(static_cast<int>(i)); });
  b.run(4, [&](std::size_t i) { sum.fetch_add(static_cast<int>(i)); });
  EXPECT_EQ(sum.load(), 12);
  b = make_pool(2);  // joins the old workers
  EXPECT_EQ(b.concurrency(), 2u);
  slm::thread_pool def;
  EXPECT_EQ(def.concurrency(), 1u);
}

TEST(ThreadPool, RunsEveryTaskOnceForAnyTaskCount) {
  slm::thread_pool pool = make_pool(4);
  for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 17u, 300u}) {
    auto hits = std::make_unique<std::atomic<int>[]>(n + 1);
    pool.run(n, [&](std::size_t i) { hits[i].fetch_add(1); });
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " task " << i;
  }
}

TEST(ThreadPool, ManyConsecutiveRuns) {
  slm::thread_pool pool = make_pool(4);
  std::atomic<std::size_t> count{0};
  for (int r = 0; r < 10000; ++r) pool.run(4, [&](std::size_t) { count.fetch_add(1, std::memory_order_relaxed); });
  EXPECT_EQ(count.load(), 40000u);
}

TEST(ThreadPool, ConcurrentRunsFromTwoThreadsSerialize) {
  slm::thread_pool pool = make_pool(3);
  auto hammer = [&pool](std::size_t* total) {
    for (int r = 0; r < 300; ++r) {
      std::vector<std::size_t> partial(3, 0);  // per-task slot: no sharing needed
      pool.run(3, [&](std::size_t t) { partial[t] = t + 1; });
      for (std::size_t p : partial) *total += p;
    }
  };
  std::size_t t1 = 0, t2 = 0;
  std::thread a(hammer, &t1), b(hammer, &t2);
  a.join();
  b.join();
  EXPECT_EQ(t1, 300u * 6);
  EXPECT_EQ(t2, 300u * 6);
}

TEST(ThreadPool, NestedRunOnTheSamePoolRunsInline) {
  slm::thread_pool pool = make_pool(3);
  std::atomic<int> inner{0};
  pool.run(3, [&](std::size_t) {
    pool.run(4, [&](std::size_t) { inner.fetch_add(1); });
  });
  EXPECT_EQ(inner.load(), 12);
}

#if defined(__linux__)
// A worker held in a signal handler stands in for one the OS descheduled on a busy
// machine (issue 18: with six busy processes on two cores, 2 threads decoded 30-50x
// slower than 1 because every run() waited a time slice for the descheduled worker).
std::atomic<bool> g_worker_held{false};
std::atomic<bool> g_worker_release{false};

extern "C" void hold_worker(int) {
  g_worker_held.store(true);
  while (!g_worker_release.load()) {
    timespec pause{0, 100000};
    nanosleep(&pause, nullptr);
  }
}

// The thread of a 2-thread pool that is not the caller: two tasks that wait for each
// other must run on both threads (the wait gives up after 5 s, leaving `found` false,
// should the pool ever run them one after the other).
pthread_t find_worker(const slm::thread_pool& pool, bool& found) {
  const pthread_t caller = pthread_self();
  std::atomic<int> arrived{0};
  pthread_t worker{};
  found = false;
  pool.run(2, [&](std::size_t) {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (arrived.load() == 2 && !pthread_equal(pthread_self(), caller)) {
      worker = pthread_self();
      found = true;
    }
  });
  return worker;
}

// Waits up to `limit` for `flag`; true when it was set.
bool wait_flag(const std::atomic<bool>& flag, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

TEST(ThreadPool, RunDoesNotWaitForAWorkerThatIsNotRunning) {
  slm::thread_pool pool = make_pool(2);
  bool found = false;
  const pthread_t worker = find_worker(pool, found);
  ASSERT_TRUE(found);
  struct sigaction hold{}, previous{};
  hold.sa_handler = hold_worker;
  sigemptyset(&hold.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &hold, &previous), 0);
  g_worker_held.store(false);
  g_worker_release.store(false);
  ASSERT_EQ(pthread_kill(worker, SIGUSR1), 0);
  ASSERT_TRUE(wait_flag(g_worker_held, std::chrono::seconds(5))) << "the worker never took the signal";

  // The old pool waited for every participant, so this run waited until the watchdog
  // released the worker (forever without it); now the caller runs every task itself.
  std::atomic<bool> run_returned{false};
  std::atomic<bool> watchdog_fired{false};
  std::thread watchdog([&] {
    if (!wait_flag(run_returned, std::chrono::seconds(2))) watchdog_fired.store(true);
    g_worker_release.store(true);
  });
  std::vector<int> hits(64, 0);
  pool.run(hits.size(), [&](std::size_t i) { ++hits[i]; });  // each task its own slot
  run_returned.store(true);
  watchdog.join();
  EXPECT_FALSE(watchdog_fired.load()) << "run() waited for a worker that was not running";
  for (std::size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i], 1) << "task " << i;

  // Back from the handler, the worker skips the job it missed and takes part again.
  const pthread_t again = find_worker(pool, found);
  EXPECT_TRUE(found && pthread_equal(again, worker));
  std::atomic<int> sum{0};
  for (int r = 0; r < 100; ++r) pool.run(8, [&](std::size_t i) { sum.fetch_add(static_cast<int>(i)); });
  EXPECT_EQ(sum.load(), 100 * 28);
  ASSERT_EQ(sigaction(SIGUSR1, &previous, nullptr), 0);
}

// A worker stuck inside a task (descheduled mid-task) holds back only that task: the
// caller claims every other one. The stuck task waits until all others are done.
TEST(ThreadPool, CallerTakesOverTheTasksOfAStuckWorker) {
  slm::thread_pool pool = make_pool(2);
  const pthread_t caller = pthread_self();
  constexpr std::size_t n = 16;
  std::atomic<std::size_t> done{0};
  std::atomic<bool> stuck_one{false};
  std::atomic<bool> gave_up{false};
  // The first task a worker takes in a run: it holds on until every other task is done
  // (at most 2 s) and says whether they all were.
  auto first_worker_task = [&] { return !pthread_equal(pthread_self(), caller) && !stuck_one.exchange(true); };
  auto stuck_until_the_others_are_done = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (done.load() < n - 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return done.load() >= n - 1;
  };
  for (int r = 0; r < 20; ++r) {
    done.store(0);
    stuck_one.store(false);
    pool.run(n, [&](std::size_t) {
      if (first_worker_task() && !stuck_until_the_others_are_done()) gave_up.store(true);
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), n);
  }
  EXPECT_FALSE(gave_up.load()) << "the caller left tasks unclaimed while a worker was stuck";

  // The caller waited over 2 ms for the stuck worker's task: a sign of a busy machine,
  // after which the pool backs off to running on the caller alone for a while. The runs
  // that follow still run every task exactly once.
  done.store(0);
  stuck_one.store(false);
  pool.run(n, [&](std::size_t) {
    if (first_worker_task()) {
      stuck_until_the_others_are_done();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), n);
  for (int r = 0; r < 200; ++r) {
    std::vector<int> hits(n, 0);
    pool.run(n, [&](std::size_t i) { ++hits[i]; });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "run " << r << " task " << i;
  }
}
#endif  // __linux__

#ifdef SLM_USE_OPENMP
TEST(OpenMP, ExecutorVisitsEachIndexOnceAndIsDeterministic) {
  slm::openmp_executor omp;
  EXPECT_GE(omp.concurrency(), 1u);
  std::vector<std::atomic<int>> hits(777);
  ASSERT_TRUE(slm::parallel_for(omp, 0, hits.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
  }).ok());
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  std::vector<float> v(5000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / static_cast<float>(i + 1);
  fixed_serial serial{omp.concurrency()};
  EXPECT_EQ(std::bit_cast<std::uint32_t>(chunked_sum(omp, v)),
            std::bit_cast<std::uint32_t>(chunked_sum(serial, v)));
}
#endif

}  // namespace
