#include "executor/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <Eigen/Dense>
#include <fmt/format.h>
#include <mpi.h>

#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "executor/cuda_runner.h"
#include "simulator/program.h"

namespace shardcast {
namespace {

using Clock = std::chrono::steady_clock;

double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// Memory this rank holds, with its high-water mark (the executor's allocator statistics).
class Tracker {
 public:
  void Add(double b) {
    cur_ += b;
    peak_ = std::max(peak_, cur_);
  }
  void Sub(double b) { cur_ -= b; }
  double peak() const { return peak_; }

 private:
  double cur_ = 0, peak_ = 0;
};

/// Touches every page so the allocation is real.
std::vector<char> Touched(std::size_t n) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; i += 4096) v[i] = 1;
  return v;
}

struct Event {
  std::string name;
  double start_s, dur_s;
};

/// One rank's communicators: its tensor-parallel and data-parallel groups, and for the routed
/// experts its expert-parallel, expert-tensor-parallel and expert-data-parallel groups.
struct Communicators {
  MPI_Comm tp = MPI_COMM_NULL, dp = MPI_COMM_NULL, ep = MPI_COMM_NULL, etp = MPI_COMM_NULL, edp = MPI_COMM_NULL;
  /// The first and last stage's ranks of the same tensor- and data-parallel index (tied
  /// embeddings); MPI_COMM_NULL on the other stages.
  MPI_Comm embedding = MPI_COMM_NULL;
};

class Runner {
 public:
  Runner(const Model& m, const ParallelConfig& c, const RankProgram& prog, const Communicators& comms, int rank,
         int stage_stride, Tracker& mem)
      : m_(m), c_(c), prog_(prog), tp_(comms.tp), dp_(comms.dp), ep_(comms.ep), etp_(comms.etp), edp_(comms.edp),
        emb_(comms.embedding), rank_(rank), stride_(stage_stride), mem_(mem), gen_(rank + 1) {}

  std::atomic<int> current{-1};

  /// Runs the program once; returns per-op seconds and the time spent waiting in receives.
  void Step(std::vector<double>* op_secs, double* recv_wait_s, std::vector<Event>* events, Clock::time_point t0) {
    op_secs->assign(prog_.ops.size(), 0.0);
    *recv_wait_s = 0;
    std::deque<std::vector<float>> send_bufs;
    std::vector<MPI_Request> reqs;
    // Asynchronous data-parallel collectives (overlap_grad_reduce) run in order on a worker
    // thread, on the data-parallel communicator, with their own buffers.
    std::vector<const ProgOp*> dp_queue;
    std::mutex dp_mu;
    std::condition_variable dp_cv;
    bool dp_closing = false;
    std::thread dp_worker;
    auto dp_wait = [&] {
      if (!dp_worker.joinable()) return;
      {
        std::lock_guard<std::mutex> l(dp_mu);
        dp_closing = true;
      }
      dp_cv.notify_one();
      dp_worker.join();
    };
    // An op failing on this rank alone (memory, MPI) leaves the others in collectives: end all
    // ranks here, naming this one, before unwinding meets the joinable worker thread.
    try {
      for (std::size_t i = 0; i < prog_.ops.size(); ++i) {
        current = static_cast<int>(i);
        const ProgOp& x = prog_.ops[i];
        const auto a = Clock::now();
        switch (x.kind) {
          case ProgKind::kCompute: Compute(x.op); break;
          case ProgKind::kTpCollective: Collective(x.op.collective, x.bytes, tp_, cs_, cr_); break;
          case ProgKind::kEpCollective: Collective(x.op.collective, x.bytes, ep_, cs_, cr_); break;
          case ProgKind::kEtpCollective: Collective(x.op.collective, x.bytes, etp_, cs_, cr_); break;
          case ProgKind::kEmbeddingCollective: Collective(x.op.collective, x.bytes, emb_, cs_, cr_); break;
          case ProgKind::kDpCollective:
            if (x.async && threads_ok_) {
              if (!dp_worker.joinable()) {
                dp_worker = std::thread([&] {
                  std::size_t next = 0;
                  for (;;) {
                    std::unique_lock<std::mutex> l(dp_mu);
                    dp_cv.wait(l, [&] { return next < dp_queue.size() || dp_closing; });
                    if (next >= dp_queue.size()) break;
                    const ProgOp* op = dp_queue[next++];
                    l.unlock();
                    Collective(op->op.collective, op->bytes, op->experts ? edp_ : dp_, ds_, dr_);
                  }
                });
              }
              {
                std::lock_guard<std::mutex> l(dp_mu);
                dp_queue.push_back(&x);
              }
              dp_cv.notify_one();
            } else {
              Collective(x.op.collective, x.bytes, x.experts ? edp_ : dp_, ds_, dr_);
            }
            break;
          case ProgKind::kDpWait: dp_wait(); break;
          case ProgKind::kOptimizer: Axpy(x.bytes); break;
          case ProgKind::kSend: {
            send_bufs.emplace_back(Floats(x.bytes), 1.0f);
            reqs.emplace_back();
            MPI_Isend(send_bufs.back().data(), static_cast<int>(send_bufs.back().size()), MPI_FLOAT, Peer(x.peer_stage),
                      x.tag, MPI_COMM_WORLD, &reqs.back());
            break;
          }
          case ProgKind::kRecv: {
            std::vector<float> buf(Floats(x.bytes));
            MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, Peer(x.peer_stage), x.tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            *recv_wait_s += Secs(a, Clock::now());
            break;
          }
          case ProgKind::kAlloc: {
            const std::size_t n = static_cast<std::size_t>(x.bytes);
            saved_[{x.microbatch, x.chunk}] = Touched(n);
            std::lock_guard<std::mutex> l(mem_mu_);
            mem_.Add(static_cast<double>(n));
            break;
          }
          case ProgKind::kFree: {
            auto it = saved_.find({x.microbatch, x.chunk});
            if (it != saved_.end()) {
              const std::size_t n = static_cast<std::size_t>(x.bytes);
              const std::size_t have = it->second.size();
              std::lock_guard<std::mutex> l(mem_mu_);
              if (n >= have) {
                mem_.Sub(static_cast<double>(have));
                saved_.erase(it);
              } else {
                mem_.Sub(static_cast<double>(n));
                it->second.resize(have - n);
                it->second.shrink_to_fit();
              }
            }
            break;
          }
        }
        const auto b = Clock::now();
        (*op_secs)[i] = Secs(a, b);
        if (events) events->push_back({OpLabel(x), Secs(t0, a), Secs(a, b)});
      }
    } catch (const std::exception& e) {
      const int op = current.load();
      std::fprintf(stderr, "shardcast: error: rank %d failed in op %d (%s): %s\n", rank_, op,
                   op >= 0 ? OpLabel(prog_.ops[static_cast<std::size_t>(op)]).c_str() : "?", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dp_wait();
    if (!reqs.empty()) MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    current = -1;
  }

  static std::string OpLabel(const ProgOp& x) {
    const char* it = x.item == ItemKind::kForward ? "F" : x.item == ItemKind::kBackward ? "B" : "W";
    const bool named = x.kind == ProgKind::kCompute || x.kind == ProgKind::kTpCollective ||
                       x.kind == ProgKind::kEpCollective || x.kind == ProgKind::kEtpCollective ||
                       x.kind == ProgKind::kEmbeddingCollective ||
                       x.kind == ProgKind::kDpCollective || x.kind == ProgKind::kOptimizer;
    std::string name = named ? x.op.name : ToString(x.kind);
    if (x.microbatch < 0) return name;
    return fmt::format("{} mb{} c{} {}", it, x.microbatch, x.chunk, name);
  }

 private:
  static std::size_t Floats(double bytes) { return std::max<std::size_t>(1, static_cast<std::size_t>(bytes / 4)); }
  int Peer(int stage) const { return rank_ % stride_ + stage * stride_; }

  void Gemm(int m, int n, int k, int reps) {
    auto key = std::make_tuple(m, n, k);
    auto it = gemm_.find(key);
    if (it == gemm_.end()) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      Mats mats{Eigen::MatrixXf(m, k), Eigen::MatrixXf(k, n), Eigen::MatrixXf(m, n)};
      for (Eigen::Index i = 0; i < mats.a.size(); ++i) mats.a.data()[i] = d(gen_);
      for (Eigen::Index i = 0; i < mats.b.size(); ++i) mats.b.data()[i] = d(gen_);
      it = gemm_.emplace(key, std::move(mats)).first;
    }
    for (int r = 0; r < reps; ++r) it->second.c.noalias() = it->second.a * it->second.b;
  }

  void Compute(const Op& o) {
    switch (o.kind) {
      case OpKind::kGemm: {
        // Batched attention GEMMs carry their per-matrix shape and the total FLOPs.
        const double one = 2.0 * o.m * o.n * o.k;
        const int reps = std::max(1, static_cast<int>(std::lround(o.flops / one)));
        Gemm(static_cast<int>(o.m), static_cast<int>(o.n), static_cast<int>(o.k), reps);
        break;
      }
      case OpKind::kAttention: {
        // Fused attention: the same FLOPs as s x s x d score and context GEMMs per head.
        const int s = static_cast<int>(c_.seq_length), d = static_cast<int>(m_.kv_channels);
        const int reps = std::max(1, static_cast<int>(std::lround(o.flops / (2.0 * s * s * d))));
        Gemm(s, s, d, reps);
        break;
      }
      case OpKind::kMemory: Axpy(o.bytes); break;
      case OpKind::kCollective: break;
    }
  }

  void Axpy(double bytes) {
    const std::size_t n = std::max<std::size_t>(1, static_cast<std::size_t>(bytes / 12));
    if (x_.size() < n) {
      std::lock_guard<std::mutex> l(mem_mu_);
      mem_.Add(static_cast<double>(n - x_.size()) * 8.0);
      x_.resize(n, 1.0f);
      y_.resize(n, 0.5f);
    }
    for (std::size_t i = 0; i < n; ++i) y_[i] = 0.999f * x_[i] + y_[i];
  }

  void Collective(CollectiveOp op, double bytes, MPI_Comm comm, std::vector<float>& send, std::vector<float>& recv) {
    int n = 1;
    MPI_Comm_size(comm, &n);
    if (n <= 1) return;
    // nccl-tests' size: all-reduce per-rank buffer; all-gather total output; reduce-scatter total input.
    const std::size_t total = Floats(bytes);
    const std::size_t per = std::max<std::size_t>(1, total / static_cast<std::size_t>(n));
    if (send.size() < total + per * n) {
      {
        std::lock_guard<std::mutex> l(mem_mu_);
        mem_.Add(static_cast<double>(total + per * n - send.size()) * 8.0);
      }
      send.resize(total + per * n, 1.0f);
      recv.resize(total + per * n, 0.0f);
    }
    switch (op) {
      case CollectiveOp::kAllReduce:
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, comm);
        break;
      case CollectiveOp::kAllGather:
        MPI_Allgather(send.data(), static_cast<int>(per), MPI_FLOAT, recv.data(), static_cast<int>(per), MPI_FLOAT, comm);
        break;
      case CollectiveOp::kReduceScatter:
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(per), MPI_FLOAT, MPI_SUM, comm);
        break;
      case CollectiveOp::kAllToAll:  // nccl-tests' size: what each rank sends in all, 1/n to each
        MPI_Alltoall(send.data(), static_cast<int>(per), MPI_FLOAT, recv.data(), static_cast<int>(per), MPI_FLOAT, comm);
        break;
      default:
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM, comm);
    }
  }

  struct Mats {
    Eigen::MatrixXf a, b, c;
  };
  const Model& m_;
  const ParallelConfig& c_;
  const RankProgram& prog_;
  MPI_Comm tp_, dp_, ep_, etp_, edp_, emb_;
  int rank_, stride_;
  Tracker& mem_;
  std::mt19937 gen_;
  std::map<std::tuple<int, int, int>, Mats> gemm_;
  std::vector<float> x_, y_, cs_, cr_, ds_, dr_;
  std::mutex mem_mu_;
  bool threads_ok_ = true;

 public:
  void set_threads_ok(bool ok) { threads_ok_ = ok; }

 private:
  std::map<std::pair<int, int>, std::vector<char>> saved_;
};

/// The configuration Execute predicts and runs: `cfg_in` (sequence from the model when unset) as
/// the program runs it, checked against the backend and the `size` MPI ranks.
ParallelConfig ExecutedConfig(const Model& model, const ParallelConfig& cfg_in, const ExecuteOptions& opts, int size) {
  if (opts.backend == "cuda") {
    std::string why;
    if (!cuda_exec::Built()) throw InputError("--backend cuda: this build has no CUDA backend");
    if (!cuda_exec::Usable(&why)) throw InputError("--backend cuda: no usable GPU was found: " + why);
    if (size != 1 || cfg_in.gpus() != 1) {
      throw InputError("--backend cuda: the CUDA executor runs one rank (TP = PP = DP = 1) so far; got " +
                       std::to_string(size) + " ranks and " + cfg_in.Summary());
    }
  }
  ParallelConfig c = cfg_in;
  if (c.seq_length <= 0) c.seq_length = model.seq_length;
  // The program gathers ZeRO-1/2 parameters after the optimizer (not overlapped with the next
  // step's forward), so the prediction is made for that too. Gradient reduction overlaps the
  // backward pass on a worker thread when the configuration says so (and MPI allows threads).
  c.overlap_param_gather = false;
  // TP collectives run in program order (the input-gradient all-reduce after the weight
  // gradient, not beside it), so the prediction does not hide them.
  c.async_tp_grad_reduce = false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) c.overlap_grad_reduce = false;
  if (c.dp < 1) {
    throw InputError(fmt::format("mpirun -np: got {} ranks, expected a multiple of tp*pp = {}*{} = {}", size, c.tp,
                                 c.pp, c.tp * c.pp));
  }
  if (size != c.gpus()) {
    throw InputError(fmt::format("mpirun -np: got {} ranks, expected tp*pp*dp = {}*{}*{} = {}", size, c.tp, c.pp, c.dp,
                                 c.gpus()));
  }
  return c;
}

/// The GPU ops of `prog` (GEMMs, attention, memory-bound passes, activation allocations) and, in
/// `index`, each program op's GPU op (or npos).
std::vector<cuda_exec::Op> GpuOpsOf(const RankProgram& prog, const Model& model, const ParallelConfig& c,
                                    std::vector<std::size_t>* index) {
  std::vector<cuda_exec::Op> ops;
  std::map<std::pair<int, int>, int> keys;
  for (const auto& x : prog.ops) {
    cuda_exec::Op g;
    bool use = true;
    if (x.kind == ProgKind::kCompute && x.op.kind == OpKind::kGemm) {
      g.kind = cuda_exec::Op::kGemm;
      g.m = static_cast<int>(x.op.m);
      g.n = static_cast<int>(x.op.n);
      g.k = static_cast<int>(x.op.k);
      g.reps = std::max(1, static_cast<int>(std::lround(x.op.flops / (2.0 * x.op.m * x.op.n * x.op.k))));
    } else if (x.kind == ProgKind::kCompute && x.op.kind == OpKind::kAttention) {
      // cuDNN's fused attention of the micro-batch on this GPU's heads (the runner falls back
      // to the s x s x d GEMMs of the same FLOPs where cuDNN cannot run).
      const int sq = static_cast<int>(c.seq_length), d = static_cast<int>(model.kv_channels);
      g.kind = cuda_exec::Op::kAttention;
      g.m = sq;
      g.n = sq;
      g.k = d;
      g.reps = std::max(1, static_cast<int>(std::lround(x.op.flops / (2.0 * sq * sq * d))));
      g.batch = static_cast<int>(c.micro_batch_size);
      g.heads = static_cast<int>(model.num_attention_heads / c.tp);
      g.kv_heads = static_cast<int>(std::max<std::int64_t>(1, model.num_query_groups / c.tp));
      g.seq = sq;
      g.head_dim = d;
      g.backward = x.op.pass == Pass::kBackwardInput;
    } else if ((x.kind == ProgKind::kCompute && x.op.kind == OpKind::kMemory) || x.kind == ProgKind::kOptimizer) {
      g.kind = cuda_exec::Op::kMemory;
      g.bytes = x.bytes > 0 ? x.bytes : x.op.bytes;
    } else if (x.kind == ProgKind::kAlloc || x.kind == ProgKind::kFree) {
      g.kind = x.kind == ProgKind::kAlloc ? cuda_exec::Op::kAlloc : cuda_exec::Op::kFree;
      g.bytes = x.bytes;
      auto key = std::make_pair(x.microbatch, x.chunk);
      if (!keys.count(key)) keys.emplace(key, static_cast<int>(keys.size()));
      g.key = keys[key];
    } else {
      use = false;
    }
    index->push_back(use ? ops.size() : std::string::npos);
    if (use) ops.push_back(g);
  }
  return ops;
}

/// One rank's part of Execute: its place in the grid, its program, and what it measured.
class RankExecution {
 public:
  RankExecution(const Model& m, const ParallelConfig& cfg, const Cluster& cl, const HardwareProfile& prof,
                const ExecuteOptions& options, int rank_index, int ranks)
      : model_(m), c_(cfg), profile_(prof), opts_(options), rank_(rank_index), size_(ranks),
        cm_(BuildCostModel(m, cfg, cl, prof)),
        sched_(MakeSchedule(c_.schedule, static_cast<int>(c_.pp), static_cast<int>(c_.num_microbatches()),
                            static_cast<int>(c_.schedule == Schedule::kInterleaved ? c_.vp : 1),
                            static_cast<int>(c_.pipeline_flushes))),
        prog_(BuildRankProgram(m, c_, cm_, sched_, prof, stage_)), sum_secs_(prog_.ops.size(), 0.0) {
    MPI_Comm_split(MPI_COMM_WORLD, rank_ / tp_, rank_, &comms_.tp);
    MPI_Comm_split(MPI_COMM_WORLD, stage_ * tp_ + tp_rank_, rank_, &comms_.dp);
    // The expert grid over the stage's tp x dp ranks, etp innermost, then ep, then edp
    // (Megatron-Core's parallel folding; CostModel's MoePlan places its groups so).
    const int local = rank_ % (tp_ * dp_), etp = static_cast<int>(c_.expert_tp()), ep = static_cast<int>(c_.ep);
    MPI_Comm_split(MPI_COMM_WORLD, rank_ / etp, rank_, &comms_.etp);
    MPI_Comm_split(MPI_COMM_WORLD, stage_ * tp_ * dp_ + local / (etp * ep) * etp + local % etp, rank_, &comms_.ep);
    MPI_Comm_split(MPI_COMM_WORLD, stage_ * tp_ * dp_ + local % (etp * ep), rank_, &comms_.edp);
    const bool edge = c_.pp > 1 && (stage_ == 0 || stage_ == c_.pp - 1);
    MPI_Comm_split(MPI_COMM_WORLD, edge ? local : MPI_UNDEFINED, rank_, &comms_.embedding);
    // Weights, gradients and optimizer state, really allocated.
    const StageMemory st = StaticStageMemory(cm_, c_, profile_, stage_);
    state_bytes_ = st.weights_bytes + st.grads_bytes + st.optimizer_bytes;
    state_ = Touched(static_cast<std::size_t>(state_bytes_));
    mem_.Add(static_cast<double>(state_.size()));
  }
  RankExecution(const RankExecution&) = delete;
  RankExecution& operator=(const RankExecution&) = delete;

  /// Runs the warm-up and timed steps (on the GPU, or on this CPU rank) into `rep`.
  void Run(ExecuteReport* rep) {
    if (opts_.backend == "cuda") {
      RunOnGpu(rep);
    } else {
      RunOnCpu(rep);
    }
  }
  /// This rank's summary: stage, peak memory, waiting, per-op totals (on a stage's representative
  /// rank) and its trace events.
  Json Summary() const;
  /// Rank 0: every rank's summary merged into `rep` (peaks, bubble, per-op errors), the trace written.
  void Merge(const std::vector<Json>& summaries, ExecuteReport* rep) const;
  /// Frees the communicators (collective: every rank, at the end; a rank that throws before it
  /// leaves them, as the process ends).
  void FreeCommunicators() {
    for (MPI_Comm* c : {&comms_.tp, &comms_.dp, &comms_.ep, &comms_.etp, &comms_.edp, &comms_.embedding}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }

 private:
  void RunOnGpu(ExecuteReport* rep);
  void RunOnCpu(ExecuteReport* rep);

  const Model& model_;
  const ParallelConfig c_;  ///< a copy: the report that holds the original is written while this runs
  const HardwareProfile& profile_;
  const ExecuteOptions& opts_;
  const int rank_, size_;
  // Rank order: tensor-parallel innermost, then data, then pipeline (Megatron-LM).
  const int tp_ = static_cast<int>(c_.tp), dp_ = static_cast<int>(c_.dp);
  const int tp_rank_ = rank_ % tp_, dp_rank_ = (rank_ / tp_) % dp_, stage_ = rank_ / (tp_ * dp_);
  const CostModel cm_;
  const PipelineSchedule sched_;
  const RankProgram prog_;
  Communicators comms_;
  Tracker mem_;
  double state_bytes_ = 0;
  std::vector<char> state_;
  std::vector<double> op_secs_, sum_secs_;  ///< [program op] last step's, and the timed steps' mean
  std::vector<Event> events_;
  double wait_sum_ = 0;
};

/// The same program on one GPU: GEMMs, memory-bound passes, activation allocations.
void RankExecution::RunOnGpu(ExecuteReport* rep) {
  std::vector<std::size_t> index;  // program op -> GPU op (or npos)
  const std::vector<cuda_exec::Op> ops = GpuOpsOf(prog_, model_, c_, &index);
  cuda_exec::Result gr;
  try {
    gr = cuda_exec::Run(ops, opts_.warmup, opts_.steps, state_bytes_);
  } catch (const std::runtime_error& e) {
    throw InputError(std::string("--backend cuda: ") + e.what());
  }
  rep->step_times_s = gr.step_s;
  rep->attention_note = gr.attention_note;
  for (std::size_t i = 0; i < prog_.ops.size(); ++i) {
    if (index[i] != std::string::npos) sum_secs_[i] = gr.op_secs[index[i]];
  }
  mem_.Add(gr.peak_bytes - mem_.peak());
}

/// The program on this CPU rank, step by step between barriers; the step time is the slowest
/// rank's. A watchdog ends every rank when a step overruns the timeout, naming this rank and its op.
void RankExecution::RunOnCpu(ExecuteReport* rep) {
  Runner run(model_, c_, prog_, comms_, rank_, tp_ * dp_, mem_);
  run.set_threads_ok(c_.overlap_grad_reduce);
  // Watchdog: a step that overruns the timeout ends every rank, naming this rank and its op.
  std::atomic<bool> done{false};
  std::atomic<double> step_start{0};
  const auto origin = Clock::now();
  std::thread watchdog([&] {
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const double s0 = step_start.load();
      if (s0 > 0 && Secs(origin, Clock::now()) - s0 > opts_.timeout_s) {
        const int op = run.current.load();
        std::fprintf(stderr, "shardcast: error: rank %d (stage %d) timed out after %.3g s in op %d (%s)\n", rank_,
                     stage_, opts_.timeout_s, op,
                     op >= 0 ? Runner::OpLabel(prog_.ops[static_cast<std::size_t>(op)]).c_str() : "?");
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  });
  for (int s = 0; s < opts_.warmup + opts_.steps; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    step_start = Secs(origin, t0);
    double wait = 0;
    const bool last = s == opts_.warmup + opts_.steps - 1;
    events_.clear();
    run.Step(&op_secs_, &wait, last && !opts_.trace.empty() ? &events_ : nullptr, t0);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = Secs(t0, Clock::now()), tmax = t;
    step_start = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (s >= opts_.warmup) {
      rep->step_times_s.push_back(tmax);
      for (std::size_t i = 0; i < op_secs_.size(); ++i) sum_secs_[i] += op_secs_[i] / opts_.steps;
      wait_sum_ += wait / opts_.steps;
    }
  }
  done = true;
  watchdog.join();
}

Json RankExecution::Summary() const {
  const bool rep_rank = tp_rank_ == 0 && dp_rank_ == 0;
  std::map<std::string, std::pair<double, double>> per_name;  // name -> (predicted, measured)
  std::map<std::string, int> counts;
  // Names of receives, data-parallel waits and the tied embedding's all-reduce (whose measured
  // time is mostly the first stage waiting for the last stage's backward).
  std::set<std::string> waits;
  if (rep_rank) {
    for (std::size_t i = 0; i < prog_.ops.size(); ++i) {
      const ProgOp& x = prog_.ops[i];
      if (x.kind == ProgKind::kAlloc || x.kind == ProgKind::kFree) continue;
      const std::string name = x.kind == ProgKind::kSend || x.kind == ProgKind::kRecv ? ToString(x.kind) : x.op.name;
      if (x.kind == ProgKind::kRecv || x.kind == ProgKind::kDpWait || x.kind == ProgKind::kEmbeddingCollective) {
        waits.insert(name);
      }
      per_name[name].first += x.op.duration_s;
      per_name[name].second += sum_secs_[i];
      ++counts[name];
    }
  }
  Json mine = {{"stage", stage_},
               {"rep", rep_rank},
               {"peak", mem_.peak()},
               {"wait", wait_sum_},
               {"ops", Json::array()},
               {"events", Json::array()}};
  for (const auto& [name, v] : per_name) mine["ops"].push_back({name, counts[name], v.first, v.second, waits.count(name) > 0});
  for (const auto& e : events_) mine["events"].push_back({e.name, e.start_s, e.dur_s, stage_, rank_});
  return mine;
}

void RankExecution::Merge(const std::vector<Json>& summaries, ExecuteReport* rep) const {
  for (std::size_t i = 0; i < prog_.ops.size(); ++i) rep->executed.push_back(Runner::OpLabel(prog_.ops[i]));
  rep->measured_peak_memory_bytes.assign(static_cast<std::size_t>(c_.pp), 0.0);
  std::map<std::string, OpError> merged;
  Json trace = Json::array();
  double bubble = 0;
  for (int r = 0; r < size_; ++r) {
    const Json& j = summaries[static_cast<std::size_t>(r)];
    const int stg = j["stage"].get<int>();
    auto& pk = rep->measured_peak_memory_bytes[static_cast<std::size_t>(stg)];
    pk = std::max(pk, j["peak"].get<double>());
    for (const auto& e : j["events"]) {
      trace.push_back({{"name", e[0]}, {"ph", "X"}, {"ts", e[1].get<double>() * 1e6}, {"dur", e[2].get<double>() * 1e6},
                       {"pid", e[3]}, {"tid", e[4]}});
    }
    if (!j["rep"].get<bool>()) continue;
    bubble += j["wait"].get<double>() / rep->measured_step_time_s / static_cast<double>(c_.pp);
    for (const auto& o : j["ops"]) {
      auto& m = merged[o[0].get<std::string>()];
      m.name = o[0].get<std::string>();
      m.count += o[1].get<int>();
      m.predicted_s += o[2].get<double>();
      m.measured_s += o[3].get<double>();
      m.wait = o[4].get<bool>();
    }
  }
  rep->measured_bubble_fraction = bubble;
  for (auto& [n, e] : merged) rep->ops.push_back(e);
  std::sort(rep->ops.begin(), rep->ops.end(), [](const OpError& a, const OpError& b) {
    return std::fabs(a.measured_s - a.predicted_s) > std::fabs(b.measured_s - b.predicted_s);
  });
  // Names for Perfetto: one process per pipeline stage, one thread per rank.
  std::set<int> stages_named;
  for (int r = 0; r < size_; ++r) {
    const int stg = r / (tp_ * dp_);  // as `stage` above
    if (stages_named.insert(stg).second) {
      trace.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", stg}, {"args", {{"name", fmt::format("stage {}", stg)}}}});
    }
    trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", stg}, {"tid", r}, {"args", {{"name", fmt::format("rank {}", r)}}}});
  }
  if (!opts_.trace.empty()) {
    Json doc = {{"traceEvents", trace}, {"displayTimeUnit", "ms"}};
    WriteFileAtomic(opts_.trace, doc.dump());
  }
}

/// Every rank's summary, gathered to rank 0 (empty elsewhere).
std::vector<Json> GatherSummaries(const Json& mine, int rank, int size) {
  const std::string text = mine.dump();
  int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<std::size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> displs(static_cast<std::size_t>(size), 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += lens[static_cast<std::size_t>(r)];
  }
  std::vector<char> all(static_cast<std::size_t>(std::max(total, 1)));
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<Json> out;
  if (rank != 0) return out;
  for (int r = 0; r < size; ++r) {
    out.push_back(Json::parse(std::string(&all[static_cast<std::size_t>(displs[static_cast<std::size_t>(r)])],
                                          static_cast<std::size_t>(lens[static_cast<std::size_t>(r)]))));
  }
  return out;
}

}  // namespace

ExecuteReport Execute(const Model& model, const ParallelConfig& cfg_in, const Cluster& cluster,
                      const HardwareProfile& profile, const ExecuteOptions& opts) {
  if (opts.backend != "cpu" && opts.backend != "cuda") {
    throw InputError("command line: --backend: got \"" + opts.backend + "\", expected cpu or cuda");
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ExecuteReport rep;
  rep.config = ExecutedConfig(model, cfg_in, opts, size);
  const ParallelConfig& c = rep.config;
  rep.predicted = Simulate(model, c, cluster, size, profile);
  if (!rep.predicted.feasible || !rep.predicted.fits) {
    throw InputError("the configuration cannot run: " + Join(rep.predicted.reasons, "; "));
  }
  RankExecution run(model, c, cluster, profile, opts, rank, size);
  run.Run(&rep);
  std::vector<double> sorted = rep.step_times_s;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t mid = sorted.size() / 2;
  rep.measured_step_time_s = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  const std::vector<Json> summaries = GatherSummaries(run.Summary(), rank, size);
  if (rank == 0) run.Merge(summaries, &rep);
  run.FreeCommunicators();
  return rep;
}

std::vector<std::string> ProgramSettings(const Model& m, const ParallelConfig& c, const ExecuteOptions& o) {
  std::vector<std::string> s = {
      "model=" + m.name,
      fmt::format("model shape=L{} h{} ffn{} heads{} groups{} kv{} vocab{} seq{}", m.num_layers, m.hidden_size,
                  m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels, m.vocab_size,
                  m.seq_length),
      fmt::format("model kind={} {} {} tied={} bias={}/{} qk_layernorm={} dropout={}", ToString(m.normalization),
                  ToString(m.activation), ToString(m.position_embedding), m.tie_embeddings, m.add_bias_linear,
                  m.add_qkv_bias, m.qk_layernorm, m.dropout),
      fmt::format("model moe=E{} k{} ffn{} shared{} first_dense{} step{}{} mtp{}", m.moe.num_experts, m.moe.top_k,
                  m.moe.ffn_hidden_size, m.moe.shared_ffn_hidden_size, m.moe.first_k_dense, m.moe.layer_step,
                  m.moe.step_from_layer0 ? " from layer 0" : "", m.mtp_num_layers),
      fmt::format("tp={}", c.tp), fmt::format("pp={}", c.pp), fmt::format("dp={}", c.dp), fmt::format("vp={}", c.vp),
      fmt::format("micro_batch_size={}", c.micro_batch_size), fmt::format("global_batch_size={}", c.global_batch_size),
      fmt::format("seq_length={}", c.seq_length), fmt::format("sequence_parallel={}", c.sequence_parallel),
      fmt::format("recompute={}", ToString(c.recompute)), fmt::format("zero_stage={}", c.zero_stage),
      fmt::format("zero3_impl={}", ToString(c.zero3_impl)),
      fmt::format("schedule={}", ToString(c.schedule)), fmt::format("precision={}", ToString(c.precision)),
      fmt::format("optimizer={}", ToString(c.optimizer_impl)), fmt::format("fp32_main_grads={}", c.fp32_main_grads),
      fmt::format("overlap_grad_reduce={}", c.overlap_grad_reduce),
      fmt::format("overlap_param_gather={}", c.overlap_param_gather),
      fmt::format("async_tp_grad_reduce={}", c.async_tp_grad_reduce),
      fmt::format("flash_attention={}", c.flash_attention), fmt::format("scatter_gather={}", c.scatter_gather),
      fmt::format("embedding_slots={}", c.embedding_slots), fmt::format("cp={}", c.cp),
      fmt::format("decoder_first_pipeline_num_layers={}", c.first_stage_layers),
      fmt::format("decoder_last_pipeline_num_layers={}", c.last_stage_layers), "backend=" + o.backend,
      fmt::format("steps={}", o.steps), fmt::format("warmup={}", o.warmup)};
  if (m.moe.enabled()) {  // the expert grid (a dense model has none: its etp would only echo tp)
    s.insert(s.end(), {fmt::format("ep={}", c.ep), fmt::format("etp={}", c.expert_tp()),
                       fmt::format("moe_dispatcher={}", ToString(c.moe_dispatcher))});
  }
  return s;
}

std::string DescribeSettingsDifference(const std::vector<std::string>& ref, const std::vector<std::string>& other,
                                       int rank) {
  std::vector<std::string> d;
  const std::size_t n = std::max(ref.size(), other.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string a = i < ref.size() ? ref[i] : "(none)";
    const std::string b = i < other.size() ? other[i] : "(none)";
    if (a != b) d.push_back(b + " (rank 0: " + a + ")");
  }
  if (d.empty()) return "";
  return fmt::format("rank {} differs from rank 0: {}", rank, Join(d, "; "));
}

void CheckRanksAgree(const std::vector<std::string>& settings) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return;
  const std::string text = Join(settings, "\n");
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a, 64 bit
  for (unsigned char ch : text) hash = (hash ^ ch) * 1099511628211ULL;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  int other = -1;
  for (int r = 1; r < size && other < 0; ++r) {
    if (all[static_cast<std::size_t>(r)] != all[0]) other = r;
  }
  if (other < 0) return;
  // Rank 0 and the first rank that differs broadcast their settings, so every rank can say how.
  auto broadcast = [&](int root) {
    std::string t = text;
    int len = static_cast<int>(t.size());
    MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD);
    t.resize(static_cast<std::size_t>(len));
    MPI_Bcast(t.data(), len, MPI_CHAR, root, MPI_COMM_WORLD);
    return Split(t, '\n');
  };
  const std::vector<std::string> ref = broadcast(0);
  const std::vector<std::string> theirs = broadcast(other);
  throw InputError("command line: ranks disagree on the configuration: " +
                   DescribeSettingsDifference(ref, theirs, other) +
                   "; expected every rank to be started with the same flags (one program, as mpirun -np N runs it)");
}

}  // namespace shardcast
