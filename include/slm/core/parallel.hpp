// slm/core/parallel.hpp - executors, deterministic parallel_for, cancellation.
//
// Threading contract of slm:
//  * A loaded model is immutable and may be shared by any number of threads.
//  * A session belongs to one thread at a time.
//  * There is no global mutable state: no default pool singleton. Whoever wants
//    parallelism passes an executor - slm's thread_pool, the OpenMP executor, or the
//    host's own pool adapted through the `executor` concept or `executor_ref`.
//  * A thread_pool may be shared across threads: concurrent run() calls serialize on
//    a mutex. A task that calls run() on the pool that is running it (nested
//    parallelism) gets its tasks run inline on its own thread instead of deadlocking.
//  * Tasks must not throw (slm is built to work with -fno-exceptions).
//
// Determinism: parallel_for splits a range into contiguous chunks whose boundaries
// depend only on (begin, end, chunk count, grain), never on timing or on which
// thread runs which chunk. A kernel that reduces per-chunk partials in chunk order is
// bit-identical run to run for a given concurrency. For results that must also match
// across machines with different thread counts, pick a fixed chunk count with
// partition() + parallel_for_chunks() instead of ex.concurrency().
#pragma once
#include "slm/core/build_mode.hpp"

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <version>  // __cpp_lib_atomic_wait

#include "slm/core/status.hpp"

#if defined(__unix__) || defined(__APPLE__)
#define SLM_DETAIL_PTHREADS 1
#include <cerrno>
#include <cstring>
#include <pthread.h>
#endif
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <intrin.h>
#endif
#ifdef SLM_USE_OPENMP
#include <omp.h>
#endif

namespace slm {

// ---------------------------------------------------------------------------------
// Cancellation: a flag the host sets from any thread; long operations poll it.

class cancellation {
 public:
  cancellation() noexcept = default;
  cancellation(const cancellation&) = delete;
  cancellation& operator=(const cancellation&) = delete;

  void cancel() noexcept { flag_.store(true, std::memory_order_release); }
  bool cancelled() const noexcept { return flag_.load(std::memory_order_acquire); }
  void reset() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// For long operations: `SLM_TRY(check_cancelled(cancel));` between steps.
inline status check_cancelled(const cancellation* c) noexcept {
  if (c && c->cancelled()) return status(errc::cancelled, "cancelled");
  return ok_status();
}

// ---------------------------------------------------------------------------------
// function_ref: a non-owning, non-allocating reference to a callable. It must not
// outlive the callable; passing a lambda straight into a call is the intended use.

template <class Sig>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> &&
             std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept {  // NOLINT: implicit by design, like a reference
    using T = std::remove_reference_t<F>;
    if constexpr (std::is_function_v<T>) {
      // A function is not an object: its address cannot go through void*.
      s_.fn = reinterpret_cast<void (*)()>(&f);
      call_ = [](storage s, Args... args) -> R {
        return invoke_as<R>(*reinterpret_cast<T*>(s.fn), std::forward<Args>(args)...);
      };
    } else {
      s_.obj = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
      call_ = [](storage s, Args... args) -> R {
        return invoke_as<R>(*static_cast<T*>(s.obj), std::forward<Args>(args)...);
      };
    }
  }

  R operator()(Args... args) const { return call_(s_, std::forward<Args>(args)...); }

 private:
  union storage {
    void* obj;
    void (*fn)();
  };
  template <class Ret, class G, class... A>
  static Ret invoke_as(G& g, A&&... a) {
    if constexpr (std::is_void_v<Ret>) {
      std::invoke(g, std::forward<A>(a)...);
    } else {
      return std::invoke(g, std::forward<A>(a)...);
    }
  }

  storage s_{nullptr};
  R (*call_)(storage, Args...) = nullptr;
};

// ---------------------------------------------------------------------------------
// Executors. run(n, fn) calls fn(0) .. fn(n-1), each exactly once, possibly
// concurrently, and returns when all have finished (their effects visible to the
// caller). concurrency() is how many tasks it can usefully run at once; it sizes the
// partition, so it must not change between calls for results to be reproducible.
// A host adapts its own pool with a small type holding these two members; run() is
// noexcept because tasks never throw.

using task_ref = function_ref<void(std::size_t)>;

template <class E>
concept executor = requires(E& e, const E& ce, std::size_t n, task_ref fn) {
  { ce.concurrency() } noexcept -> std::convertible_to<std::size_t>;
  { e.run(n, fn) } noexcept;
};

struct serial_executor {
  std::size_t concurrency() const noexcept { return 1; }
  void run(std::size_t n, task_ref fn) const noexcept {
    for (std::size_t i = 0; i < n; ++i) fn(i);
  }
};

#ifdef SLM_USE_OPENMP
struct openmp_executor {
  std::size_t concurrency() const noexcept {
    const int n = omp_get_max_threads();
    return n > 0 ? static_cast<std::size_t>(n) : 1;
  }
  void run(std::size_t n, task_ref fn) const noexcept {
    if (n <= 1) {  // no parallel region for a single task
      if (n == 1) fn(0);
      return;
    }
    // Signed loop variable: older OpenMP implementations require one.
    const std::ptrdiff_t count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) fn(static_cast<std::size_t>(i));
  }
};
#endif

// A type-erased reference to any executor, so non-template code (the config-driven
// runtime) can take the host's pool. It does not own the executor; keep that alive.
// A const executor is referenced when its run() is const (thread_pool's is: a pool
// shared through a const reference still runs work); obj_ drops the const only to be
// stored and is cast back to E* (const E* for a const E) before any use.
class executor_ref {
 public:
  template <class E>
    requires(!std::is_same_v<std::remove_const_t<E>, executor_ref> && executor<E>)
  executor_ref(E& e) noexcept  // NOLINT: implicit, like a reference
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(e)))),
        concurrency_([](const void* o) noexcept -> std::size_t {
          return static_cast<std::size_t>(static_cast<const E*>(o)->concurrency());
        }),
        run_([](void* o, std::size_t n, task_ref fn) noexcept { static_cast<E*>(o)->run(n, fn); }) {}
  // A const temporary would dangle at the end of the full expression.
  template <class E>
    requires(!std::is_same_v<std::remove_const_t<E>, executor_ref>)
  executor_ref(const E&&) = delete;

  template <class E>
    requires(!std::is_same_v<std::remove_const_t<E>, executor_ref> && executor<E>)
  static executor_ref from(E& e) noexcept {
    return executor_ref(e);
  }

  std::size_t concurrency() const noexcept { return concurrency_(obj_); }
  void run(std::size_t n, task_ref fn) const noexcept { run_(obj_, n, fn); }

 private:
  void* obj_;
  std::size_t (*concurrency_)(const void*) noexcept;
  void (*run_)(void*, std::size_t, task_ref) noexcept;
};

static_assert(executor<serial_executor>);
static_assert(executor<executor_ref>);

inline std::size_t hardware_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? n : 1;
}

// ---------------------------------------------------------------------------------
// thread_pool: persistent workers; the thread calling run() works too.

namespace detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
  _mm_pause();
#endif
}

// Busy-wait for `done` up to `budget`. Spinning keeps back-to-back run() calls (one
// per layer/matmul) at microseconds; blocking on a futex costs tens of them. Past the
// first few microseconds the spinner yields between polls: on a busy machine the
// thread it waits for may be queued behind it on its own core, and a bare spin would
// hold that core for the rest of its time slice. On an idle core yield returns at once.
template <class Pred>
bool spin_until(Pred done, std::chrono::nanoseconds budget) noexcept {
  if (budget.count() <= 0) return done();
  const auto start = std::chrono::steady_clock::now();
  const auto polite_after = std::chrono::microseconds(5);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    const auto spent = std::chrono::steady_clock::now() - start;
    if (spent > budget) return done();
    if (spent > polite_after) std::this_thread::yield();
  }
}

// A 32-bit counter threads can sleep on. With C++20 atomic wait (a futex on Linux)
// one notify wakes every sleeper at once; a condition variable would make them file
// through its mutex one wake-up at a time, hundreds of microseconds for 16 threads.
struct wake_signal {
  std::atomic<std::uint32_t> seq{0};
#ifndef __cpp_lib_atomic_wait
  std::mutex m;
  std::condition_variable cv;
#endif

  // Sleeps while seq == old; returns at once if it already moved on.
  void wait(std::uint32_t old) noexcept {
#ifdef __cpp_lib_atomic_wait
    seq.wait(old, std::memory_order_seq_cst);
#else
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return seq.load(std::memory_order_seq_cst) != old; });
#endif
  }
  void notify_all() noexcept {
    seq.fetch_add(1, std::memory_order_seq_cst);
#ifdef __cpp_lib_atomic_wait
    seq.notify_all();
#else
    { std::lock_guard<std::mutex> lk(m); }  // no waiter between its check and wait
    cv.notify_all();
#endif
  }
};

// Spin for `ready`, then sleep on `signal` until it holds. `sleepers` lets the waking
// side skip the notify system call when nobody sleeps; the seq_cst increment here
// and the seq_cst publish-then-check there guarantee one of the two sees the other.
template <class Pred>
void wait_for(Pred ready, wake_signal& signal, std::atomic<std::uint32_t>& sleepers,
              std::chrono::nanoseconds spin) noexcept {
  if (spin_until(ready, spin)) return;
  for (;;) {
    const std::uint32_t seq = signal.seq.load(std::memory_order_seq_cst);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const bool done = ready();
    if (!done) signal.wait(seq);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done || ready()) return;
  }
}

struct pool_state;

struct pool_worker {
  pool_state* owner = nullptr;
  std::size_t index = 0;  // 1..n_threads-1; the caller of run() is 0
#ifdef SLM_DETAIL_PTHREADS
  pthread_t handle{};
#else
  std::thread thread;
#endif
};

// Everything workers touch; lives behind a unique_ptr so the pool can move.
// The job is published through `word` = (generation << 16) | participants: one atomic
// load tells a worker both that there is a new job and whether it takes part, so
// workers not needed for a small job never touch the job's fields.
//
// A worker must join a job (`entry`) before it touches the job's fields, and the
// caller waits only for the workers that joined. On a busy machine a worker may be
// descheduled for a whole time slice (milliseconds) just when a job is published;
// the caller then claims every task itself, closes the entry and returns, and the
// late worker finds the entry closed (or a later generation) and skips the job. The
// caller never waits for a worker that has not started, only for tasks that a running
// worker claimed. Which thread runs a task never changes what it computes.
struct pool_state {
  static constexpr std::uint64_t participants_mask = 0xffff;
  // entry = (generation << 17) | closed | joined: joined in the low 16 bits.
  static constexpr std::uint64_t entry_closed = std::uint64_t{1} << 16;
  static constexpr std::uint64_t entry_joined_mask = 0xffff;
  static constexpr int entry_generation_shift = 17;

  explicit pool_state(std::size_t n) noexcept : n_threads(n) {}
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;

  ~pool_state();

  // Take tasks until none are left. Dynamic claiming only decides which thread runs
  // a task, never what the task computes, so results stay deterministic.
  void drain() noexcept;

  void worker_main(std::size_t index) noexcept;

  // Worker side: join generation `gen` unless the caller closed it or moved on.
  bool join(std::uint64_t gen) noexcept;

  // Caller side, holding run_mutex.
  void dispatch(std::size_t n, const task_ref& fn) noexcept;

  // Is this thread one of this pool's workers (so already inside one of its runs)?
  bool is_worker_thread() const noexcept;

  const std::size_t n_threads;
  std::chrono::nanoseconds worker_spin{0};  // then sleep until the next job
  std::chrono::nanoseconds caller_spin{0};  // then sleep until the workers finish

  // Back-off on a busy machine, caller side (under run_mutex). Workers are descheduled
  // there for whole time slices, and a runnable (spinning) worker takes a share of the
  // cores from the caller without doing its part. Two signs: the caller, out of tasks,
  // waited for a joined worker much longer than it worked itself (that worker lost its
  // core mid-task), or, over back-to-back runs (within the workers' spin, so none had
  // a reason to sleep), fewer than half the workers joined each for over a millisecond
  // (far past a wake-up on an idle machine; one slow worker of many is no reason to
  // drop them all: the others take over its tasks). Either makes the runs until
  // `solo_until` the caller's alone (the same tasks, so the same results) while the
  // workers fall asleep; each sign doubles the next back-off, up to 64 ms, and every
  // 256 runs without a sign halve it. On an idle machine neither sign shows.
  static constexpr std::chrono::microseconds backoff_min{1000};
  static constexpr std::chrono::microseconds backoff_max{64000};
  std::chrono::steady_clock::time_point solo_until{};
  std::chrono::steady_clock::time_point last_end{};  // of the last parallel run
  std::chrono::microseconds backoff = backoff_min;
  std::uint32_t on_time = 0;  // runs without a sign since the last one
  bool missing = false;       // most workers missed every run since missing_since
  std::chrono::steady_clock::time_point missing_since{};
  void back_off(std::chrono::steady_clock::time_point now) noexcept;
  std::unique_ptr<pool_worker[]> workers;
  std::size_t n_started = 0;

  std::mutex run_mutex;                  // one run() at a time
  std::atomic<std::thread::id> owner{};  // the thread holding run_mutex
  std::uint64_t generation = 0;          // written only under run_mutex
  const task_ref* job_fn = nullptr;      // published by `word`
  std::size_t job_n = 0;

  // Separate cache lines: workers poll `word`, hammer `next`, count down `pending`.
  alignas(64) std::atomic<std::uint64_t> word{0};
  std::atomic<bool> stop{false};
  std::atomic<std::uint32_t> wake_sleepers{0};
  wake_signal wake;  // workers: a new word or stop
  alignas(64) std::atomic<std::size_t> next{0};
  alignas(64) std::atomic<std::uint64_t> entry{0};
  alignas(64) std::atomic<std::uint32_t> finished{0};  // joined workers done with the job
  std::atomic<std::uint32_t> done_sleepers{0};
  wake_signal done;  // caller: a joined worker finished
};

#ifdef SLM_DETAIL_PTHREADS
void* pool_worker_entry(void* arg) noexcept;

// strerror_r is the XSI (int) or the GNU (char*) variant depending on the libc.
inline const char* strerror_pick(int rc, const char* buf) noexcept { return rc == 0 ? buf : "unknown error"; }
inline const char* strerror_pick(const char* s, const char*) noexcept { return s; }
std::string errno_text(int e);
#endif

}  // namespace detail

// A fixed set of worker threads. run() hands out tasks to the workers and to the
// calling thread, then waits for all of them; it does not allocate. Between runs a
// worker spins for about 100 us (so back-to-back runs cost ~1-2 us) and then sleeps;
// with more threads than hardware threads nobody spins. On a busy machine the caller
// never waits for a worker that is not running (it runs the tasks itself), and when
// workers keep missing runs or stall mid-task it runs alone for a while (pool_state's
// back-off), so more threads are not slower than one there. Any thread may call run();
// calls from different threads take turns. Tasks must not run() a pool that is
// waiting on their own pool (a cycle between two pools deadlocks); run() on their
// own pool is fine and runs inline.
class thread_pool {
 public:
  // Bounded by the 16 bits that carry the participant count in a job word.
  static constexpr std::size_t max_threads = 4096;

  // A default pool has no workers: concurrency 1, run() is inline. Same as create(1).
  thread_pool() noexcept = default;
  thread_pool(thread_pool&&) noexcept = default;
  thread_pool& operator=(thread_pool&&) noexcept = default;  // joins the old workers
  ~thread_pool() = default;                                  // joins the workers

  // n_threads counts the thread that calls run(): create(4) starts 3 workers. Fails
  // (rather than aborting) when the OS refuses a thread or memory runs out.
  static result<thread_pool> create(std::size_t n_threads);

  std::size_t concurrency() const noexcept { return s_ ? s_->n_threads : 1; }

  // Safe to call from several threads: calls serialize. Does not allocate. const: a
  // pool shared through a const reference runs work too (its state is synchronized).
  void run(std::size_t n_tasks, task_ref fn) const noexcept;

 private:
  // The caller of a run() in progress calling run() again from a task: locking
  // run_mutex again would deadlock (and try_lock on an owned mutex is undefined).
  static bool nested(const detail::pool_state& s) noexcept {
    return s.owner.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  std::unique_ptr<detail::pool_state> s_;
};

static_assert(executor<thread_pool>);
static_assert(executor<const thread_pool>);
static_assert(std::is_constructible_v<executor_ref, const thread_pool&>);
static_assert(!std::is_constructible_v<executor_ref, const thread_pool&&>);
#ifdef SLM_USE_OPENMP
static_assert(executor<openmp_executor>);
#endif

// ---------------------------------------------------------------------------------
// Deterministic static partitioning.

struct index_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  constexpr std::size_t size() const noexcept { return end - begin; }
  constexpr bool empty() const noexcept { return begin == end; }
  friend constexpr bool operator==(const index_range&, const index_range&) = default;
};

// [begin, end) cut into `count` contiguous chunks whose sizes differ by at most one
// (the first size % count chunks get the extra element).
struct static_partition {
  std::size_t begin = 0;
  std::size_t size = 0;
  std::size_t count = 0;

  constexpr index_range chunk(std::size_t i) const noexcept {
    if (i >= count) return {begin + size, begin + size};
    const std::size_t base = size / count;
    const std::size_t extra = size % count;
    const std::size_t lo = begin + i * base + (i < extra ? i : extra);
    return {lo, lo + base + (i < extra ? 1 : 0)};
  }
};

// At most `max_chunks` chunks, each at least `grain` long (one chunk when the whole
// range is shorter than grain), none when the range is empty. begin > end is empty.
// Pure: the same arguments always give the same chunks.
constexpr static_partition partition(std::size_t begin, std::size_t end, std::size_t max_chunks,
                                     std::size_t grain = 1) noexcept {
  if (end <= begin) return {begin, 0, 0};
  const std::size_t n = end - begin;
  if (grain == 0) grain = 1;
  if (max_chunks == 0) max_chunks = 1;
  std::size_t count = n / grain;  // floor keeps every chunk >= grain
  if (count == 0) count = 1;
  if (count > max_chunks) count = max_chunks;
  return {begin, n, count};
}

// How many chunks to cut work into whose results do not depend on the cut (each
// output computed whole by one task): a few per thread, so a thread that runs slow or
// is descheduled on a busy machine holds back only a small share, which the others
// take over; one chunk per thread would leave the rest waiting for its whole half.
// One for a serial executor, which has nothing to balance.
template <class E>
  requires executor<std::remove_reference_t<E>>
std::size_t balanced_chunks(const E& ex) noexcept {
  const std::size_t c = static_cast<std::size_t>(ex.concurrency());
  return c <= 1 ? 1 : 4 * c;
}

// Runs body(c) for c in [0, n_chunks) on `ex`, one task per chunk. Cancellation is
// checked before each chunk starts; chunks already running finish. Returns cancelled
// when the token skipped at least one chunk (the work is incomplete), ok otherwise.
template <class E, class F>
  requires executor<std::remove_reference_t<E>> && std::invocable<F&, std::size_t>
status parallel_for_chunks(E&& ex, std::size_t n_chunks, F&& body, const cancellation* cancel = nullptr) {
  if (n_chunks == 0) return ok_status();
  if (cancel && cancel->cancelled()) return status(errc::cancelled, "cancelled");
  if (n_chunks == 1) {  // nothing to share: skip the executor's dispatch cost
    body(std::size_t{0});
    return ok_status();
  }
  std::atomic<bool> skipped{false};
  auto task = [&](std::size_t c) {
    if (cancel && cancel->cancelled()) {
      skipped.store(true, std::memory_order_relaxed);
      return;
    }
    body(c);
  };
  ex.run(n_chunks, task_ref(task));
  if (skipped.load(std::memory_order_relaxed)) return status(errc::cancelled, "cancelled");
  return ok_status();
}

// body(lo, hi) over [begin, end) in up to ex.concurrency() chunks of at least `grain`.
template <class E, class F>
  requires executor<std::remove_reference_t<E>> && std::invocable<F&, std::size_t, std::size_t>
status parallel_for(E&& ex, std::size_t begin, std::size_t end, std::size_t grain, F&& body,
                    const cancellation* cancel = nullptr) {
  if (end < begin)
    return make_error(errc::invalid_argument, "parallel_for: begin ", begin, " is past end ", end);
  const static_partition p = partition(begin, end, static_cast<std::size_t>(ex.concurrency()), grain);
  return parallel_for_chunks(
      ex, p.count,
      [&](std::size_t c) {
        const index_range r = p.chunk(c);
        body(r.begin, r.end);
      },
      cancel);
}

template <class E, class F>
  requires executor<std::remove_reference_t<E>> && std::invocable<F&, std::size_t, std::size_t>
status parallel_for(E&& ex, std::size_t begin, std::size_t end, F&& body, const cancellation* cancel = nullptr) {
  return parallel_for(ex, begin, end, 1, body, cancel);
}

#if SLM_DEFINE_IO

SLM_INLINE detail::pool_state::~pool_state() {
  stop.store(true, std::memory_order_seq_cst);
  wake.notify_all();
  for (std::size_t i = 0; i < n_started; ++i) {
#ifdef SLM_DETAIL_PTHREADS
    pthread_join(workers[i].handle, nullptr);
#else
    workers[i].thread.join();
#endif
  }
}

SLM_INLINE void detail::pool_state::drain() noexcept {
  const task_ref& fn = *job_fn;
  const std::size_t n = job_n;
  for (std::size_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(t);
}

SLM_INLINE bool detail::pool_state::join(std::uint64_t gen) noexcept {
  const std::uint64_t open = gen << entry_generation_shift;
  std::uint64_t e = entry.load(std::memory_order_acquire);
  for (;;) {
    if ((e & ~entry_joined_mask) != open) return false;  // closed, or another job's
    // acquire: the job's fields, written before the caller opened the entry.
    if (entry.compare_exchange_weak(e, e + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

SLM_INLINE void detail::pool_state::worker_main(std::size_t index) noexcept {
  std::uint64_t seen = 0;  // not the current word: a job may predate our start
  for (;;) {
    wait_for([&] { return word.load(std::memory_order_seq_cst) != seen || stop.load(std::memory_order_seq_cst); },
             wake, wake_sleepers, worker_spin);
    if (stop.load(std::memory_order_acquire)) return;
    // A generation this worker takes part in cannot end without it, so any job it
    // missed while asleep was one it had no part in.
    seen = word.load(std::memory_order_acquire);
    if (index >= (seen & participants_mask)) continue;
    if (!join(seen >> 16)) continue;  // too late: the caller already did every task
    drain();
    finished.fetch_add(1, std::memory_order_seq_cst);
    if (done_sleepers.load(std::memory_order_seq_cst) != 0) done.notify_all();
  }
}

SLM_INLINE void detail::pool_state::dispatch(std::size_t n, const task_ref& fn) noexcept {
  const auto start = std::chrono::steady_clock::now();
  if (start < solo_until) {  // backing off: see solo_until
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const std::size_t p = n < n_threads ? n : n_threads;
  job_fn = &fn;
  job_n = n;
  next.store(0, std::memory_order_relaxed);
  finished.store(0, std::memory_order_relaxed);
  // 47 bits of generation in entry, 48 in word: neither wraps in practice.
  ++generation;
  const std::uint64_t gen = generation & (~std::uint64_t{0} >> entry_generation_shift);
  entry.store(gen << entry_generation_shift, std::memory_order_release);  // open for joining
  word.store((gen << 16) | p, std::memory_order_seq_cst);               // publishes the job
  if (wake_sleepers.load(std::memory_order_seq_cst) != 0) wake.notify_all();
  drain();
  // Every task is claimed: close the entry, then wait only for the workers inside.
  const std::uint64_t joined = entry.fetch_or(entry_closed, std::memory_order_acq_rel) & entry_joined_mask;
  if (start - last_end > worker_spin) missing = false;  // workers may sleep: a fresh start
  if (2 * joined < p - 1) {  // most workers missed this run
    if (!missing) {
      missing = true;
      missing_since = start;
    } else if (start - missing_since > std::chrono::milliseconds(1)) {
      back_off(start);
    }
  } else {
    missing = false;
  }
  auto all_finished = [&] { return finished.load(std::memory_order_seq_cst) == joined; };
  if (joined != 0 && !all_finished()) {
    const auto drained = std::chrono::steady_clock::now();
    wait_for(all_finished, done, done_sleepers, caller_spin);
    // Late: waited longer than a wake-up and than its own work. A running worker
    // finishes its last task within about one task's time of the caller.
    last_end = std::chrono::steady_clock::now();
    if (last_end - drained > std::chrono::microseconds(500) + (drained - start)) {
      back_off(last_end);
      return;
    }
  } else {
    last_end = std::chrono::steady_clock::now();
  }
  if (!missing && ++on_time >= 256) {
    if (backoff > backoff_min) backoff /= 2;
    on_time = 0;
  }
}

SLM_INLINE void detail::pool_state::back_off(std::chrono::steady_clock::time_point now) noexcept {
  solo_until = now + backoff;
  backoff = backoff < backoff_max ? backoff * 2 : backoff_max;
  on_time = 0;
  missing = false;
}

SLM_INLINE bool detail::pool_state::is_worker_thread() const noexcept {
  for (std::size_t i = 0; i < n_started; ++i) {
#ifdef SLM_DETAIL_PTHREADS
    if (pthread_equal(pthread_self(), workers[i].handle)) return true;
#else
    if (workers[i].thread.get_id() == std::this_thread::get_id()) return true;
#endif
  }
  return false;
}

#ifdef SLM_DETAIL_PTHREADS
namespace detail {

SLM_INLINE void* pool_worker_entry(void* arg) noexcept {
  auto* w = static_cast<pool_worker*>(arg);
  w->owner->worker_main(w->index);
  return nullptr;
}

SLM_INLINE std::string errno_text(int e) {
  char buf[256] = {};
  return strerror_pick(strerror_r(e, buf, sizeof buf), buf);
}

}  // namespace detail
#endif  // SLM_DETAIL_PTHREADS

SLM_INLINE result<thread_pool> thread_pool::create(std::size_t n_threads) {
  if (n_threads == 0) return make_error(errc::invalid_argument, "thread_pool: n_threads must be at least 1");
  if (n_threads > max_threads)
    return make_error(errc::out_of_range, "thread_pool: ", n_threads, " threads requested, at most ",
                      max_threads, " supported");
  thread_pool pool;
  if (n_threads == 1) return pool;
  pool.s_.reset(new (std::nothrow) detail::pool_state(n_threads));
  detail::pool_state* s = pool.s_.get();
  if (s) s->workers.reset(new (std::nothrow) detail::pool_worker[n_threads - 1]);
  if (!s || !s->workers) return make_error(errc::out_of_memory, "thread_pool: cannot allocate pool state");
  // Spinning only helps when every thread has a core; oversubscribed, spinners
  // steal time from the threads doing the work. The caller spins longer: its core
  // has nothing else to do, and sleeping would add a second wake-up (tens to
  // hundreds of microseconds) when a worker is late.
  if (n_threads <= hardware_threads()) {
    s->worker_spin = std::chrono::microseconds(100);
    s->caller_spin = std::chrono::microseconds(1000);
  }
  for (std::size_t i = 0; i + 1 < n_threads; ++i) {
    detail::pool_worker& w = s->workers[i];
    w.owner = s;
    w.index = i + 1;
#ifdef SLM_DETAIL_PTHREADS
    const int rc = pthread_create(&w.handle, nullptr, &detail::pool_worker_entry, &w);
    if (rc != 0) {
      // Returning destroys the state, which stops and joins the workers started.
      return make_error(rc == EAGAIN || rc == ENOMEM ? errc::out_of_memory : errc::io_error,
                        "thread_pool: cannot start thread ", i + 2, " of ", n_threads, ": ",
                        detail::errno_text(rc));
    }
#elif defined(__cpp_exceptions)
    try {
      w.thread = std::thread([s, idx = w.index] { s->worker_main(idx); });
    } catch (const std::exception& e) {
      return make_error(errc::out_of_memory, "thread_pool: cannot start thread ", i + 2, " of ",
                        n_threads, ": ", e.what());
    }
#else
    // Without exceptions std::thread cannot report failure; only POSIX avoids this.
    w.thread = std::thread([s, idx = w.index] { s->worker_main(idx); });
#endif
    ++s->n_started;
  }
  return pool;
}

SLM_INLINE void thread_pool::run(std::size_t n_tasks, task_ref fn) const noexcept {
  if (n_tasks == 0) return;
  detail::pool_state* s = s_.get();
  if (!s || n_tasks == 1 || nested(*s)) {
    for (std::size_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(s->run_mutex, std::try_to_lock);
  if (!lock.owns_lock()) {
    if (s->is_worker_thread()) {  // a worker of this pool, inside one of its tasks
      for (std::size_t i = 0; i < n_tasks; ++i) fn(i);
      return;
    }
    lock.lock();
  }
  s->owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
  s->dispatch(n_tasks, fn);
  s->owner.store(std::thread::id{}, std::memory_order_relaxed);
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
