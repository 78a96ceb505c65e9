#include <iostream>

#include "cli/commands.h"
#include "report/catalog.h"

namespace shardcast::cli {

void RegisterModels(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "models",
      "List the built-in presets: models, GPUs and clusters, one line each.\n"
      "Example: shardcast models");
  cmd->callback([] {
    WriteCatalog(std::cout);
  });
}

}  // namespace shardcast::cli
