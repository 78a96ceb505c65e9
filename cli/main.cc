// The shardcast binary: argument parsing and output only; the work is in the libraries.
// Exit codes: 0 success, 2 bad input, 1 internal error.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "common/text.h"

namespace {

/// A mistyped command word ("plann", "profile shw", "calibrate imprt"): the word right after a
/// command that has subcommands, when it is none of them. Returns the message, or "".
std::string UnknownCommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cur = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : cur->get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->check_name(word)) next = sub;
    }
    if (names.empty()) return "";
    if (!next) {
      const auto close = shardcast::ClosestMatches(word, names, 3);
      // A command that runs without a subcommand (calibrate): a word far from its subcommands
      // is an unexpected argument, which the caller reports as such.
      if (cur->get_require_subcommand_min() == 0 && close.empty()) return "";
      const std::string where = cur == &app ? "command" : "subcommand of " + cur->get_name();
      return "got unknown " + where + " \"" + word + "\", expected one of " + shardcast::Join(names, ", ") +
             (close.empty() ? std::string() : "; did you mean " + shardcast::Join(close, ", ") + "?") +
             " (shardcast " + (cur == &app ? std::string() : cur->get_name() + " ") + "--help describes them)";
    }
    cur = next;
  }
  return "";
}

/// Arguments the command does not take (CLI11's ExtrasError `e`): a mistyped command word, else
/// the extra arguments in the order typed, with the command's closest option names. Exit code 2.
int ExtraArguments(const CLI::App& app, const CLI::ExtrasError& e, int argc, char** argv) {
  if (const std::string msg = UnknownCommand(app, argc, argv); !msg.empty()) {
    std::cerr << "shardcast: error: command line: " << msg << "\n";
    return 2;
  }
  // CLI11 lists the extra arguments last to first; name them in the order they were typed.
  const std::string what = e.what();
  const auto colon = what.find(':');
  std::set<std::string> extra;
  std::istringstream words(colon == std::string::npos ? std::string() : what.substr(colon + 1));
  for (std::string w; words >> w;) extra.insert(w);
  std::string in_order;
  for (int i = 1; i < argc; ++i) {
    if (extra.count(argv[i])) in_order += std::string(in_order.empty() ? "" : " ") + argv[i];
  }
  // A mistyped flag: the command's closest option names.
  // The options of the innermost command given (e.g. calibrate import).
  std::vector<std::string> longs;
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  for (const CLI::Option* opt : cmd->get_options()) {
    for (const std::string& n : opt->get_lnames()) longs.push_back("--" + n);
  }
  std::string hint;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!extra.count(arg) || arg.rfind("--", 0) != 0) continue;
    const std::string name = arg.substr(0, arg.find('='));
    // Megatron-LM flags whose values are not read, with what expresses them here.
    if (name == "--pipeline-model-parallel-layout") {
      hint += "; " + name + " strings are not read: --pipeline-layout-even (the layers spread evenly over the "
              "chunks, written as such a string by --emit) or --decoder-first/last-pipeline-num-layers give uneven "
              "splits";
      continue;
    }
    auto close = shardcast::ClosestMatches(name, longs, 3);
    if (close.empty()) {
      // An option of another command that extends one of this command's (--zero-stages, --zero).
      std::string prefix;
      for (const auto& l : longs) {
        if (name.rfind(l, 0) == 0 && l.size() > prefix.size()) prefix = l;
      }
      if (!prefix.empty()) close.push_back(prefix);
    }
    if (!close.empty()) hint += "; for " + arg + " did you mean " + shardcast::Join(close, ", ") + "?";
  }
  std::cerr << "shardcast: error: command line: got unexpected arguments \"" << (in_order.empty() ? what : in_order)
            << "\", expected only the options of the command (--help lists them)" << hint << "\n";
  return 2;
}

/// Any other parse error (CLI11's ParseError `e`): a mistyped command, an option given twice, or
/// CLI11's message. Exit code 2.
int ParseFailure(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  // A mistyped command ("plann") reaches here as "A subcommand is required": name it instead.
  if (const std::string msg = UnknownCommand(app, argc, argv); !msg.empty()) {
    std::cerr << "shardcast: error: command line: " << msg << "\n";
    return 2;
  }
  // An option given twice: CLI11 says "--gpus: At Most 1 required but received 2".
  const std::string what = e.what();
  const std::string twice = ": At Most 1 required but received ";
  if (const auto at = what.find(twice); at != std::string::npos) {
    std::cerr << "shardcast: error: command line: " << what.substr(0, at) << ": given "
              << what.substr(at + twice.size()) << " times, expected once\n";
    return 2;
  }
  std::cerr << "shardcast: error: command line: " << what << "\n"
            << "Run with --help for the options and an example.\n";
  return 2;
}

}  // namespace

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
  } catch (const CLI::ExtrasError& e) {
    return ExtraArguments(app, e, argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e, argc, argv);
  } catch (const shardcast::InputError& e) {
    std::cout.flush();
    std::cerr << "shardcast: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "shardcast: internal error: " << e.what() << "\n";
    return 1;
  }
  // Output that could not be written (a full disk, a closed pipe with SIGPIPE ignored) is a
  // failure, not a success with nothing in the file.
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "shardcast: error: standard output: write failed (disk full or pipe closed?)\n";
    return 2;
  }
  return 0;
}
