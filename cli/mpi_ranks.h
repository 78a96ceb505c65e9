#pragma once
// What the MPI subcommands (calibrate, execute) share: ending every rank after an error.
#include <exception>

#include <mpi.h>

namespace shardcast::cli {

/// Ends every rank of a multi-rank run after `e` with the message, never a hang. Bad input fails
/// every rank at the same check: they meet at a barrier of their own (on `agree`, a duplicate of
/// MPI_COMM_WORLD used for nothing else, freed here) and exit cleanly, rank 0 printing the message
/// once. A rank failing alone (mid-run) leaves the others in the program's collectives: after
/// 10 s without the barrier, MPI_Abort ends them all. Exit code 2 for InputError, else 1.
[[noreturn]] void EndAllRanks(const std::exception& e, int rank, MPI_Comm agree);

}  // namespace shardcast::cli
