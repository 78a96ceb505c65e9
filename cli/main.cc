// The shardcast binary: argument parsing and output only; the work is in the libraries.
// Exit codes: 0 success, 2 bad input, 1 internal error.
#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "shardcast: parallelism planner and cluster performance simulator for LLM training.\n"
      "Example: shardcast describe --model gpt3-175b --cluster dgx-a100 --gpus 1024"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardcast 0.1.0");
  shardcast::cli::RegisterModels(app);
  shardcast::cli::RegisterDescribe(app);
  shardcast::cli::RegisterSimulate(app);
  shardcast::cli::RegisterPlan(app);
  shardcast::cli::RegisterCapacity(app);
  shardcast::cli::RegisterValidate(app);
  shardcast::cli::RegisterCalibrate(app);
  shardcast::cli::RegisterProfile(app);
  shardcast::cli::RegisterExecute(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "shardcast: error: command line: " << e.what() << "\n"
              << "Run with --help for the options and an example.\n";
    return 2;
  } catch (const shardcast::InputError& e) {
    std::cout.flush();
    std::cerr << "shardcast: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "shardcast: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
