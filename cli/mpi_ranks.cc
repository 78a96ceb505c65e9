#include "cli/mpi_ranks.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/error.h"

namespace shardcast::cli {

[[noreturn]] void EndAllRanks(const std::exception& e, int rank, MPI_Comm agree) {
  const int code = dynamic_cast<const InputError*>(&e) ? 2 : 1;
  if (rank == 0) std::cerr << "shardcast: error: " << e.what() << "\n" << std::flush;
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(agree, &req);
  int done = 0;
  for (int ms = 0; ms < 10000 && !done; ++ms) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done) {
    // This rank failed alone: say so from here (rank 0 may not be the one that knows).
    if (rank != 0) std::cerr << "shardcast: error: rank " << rank << ": " << e.what() << "\n" << std::flush;
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Comm_free(&agree);
  MPI_Finalize();
  std::exit(code);
}

}  // namespace shardcast::cli
