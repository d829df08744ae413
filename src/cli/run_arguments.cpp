#include "cli/run_arguments.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "dlock/errors.hpp"

namespace dlock::cli {
namespace {

using Words = std::vector<std::string>;

bool looks_like_option(const std::string& word) { return word.size() > 1 && word[0] == '-' && word != "--"; }

// How many words the option at words[i] spans with its value (1 or 2); 1 for a word that is no
// option of `command` or of the top level `app`, which CLI11 then reports.
std::size_t option_span(const CLI::App& app, const CLI::App& command, const Words& words, std::size_t i) {
  const auto find = [&](const std::string& name) {
    const CLI::Option* option = command.get_option_no_throw(name);
    return option != nullptr ? option : app.get_option_no_throw(name);
  };
  const auto takes_value = [](const CLI::Option* option) { return option->get_items_expected_min() > 0; };
  const std::string& word = words[i];
  std::size_t span = 1;
  if (word.starts_with("--")) {
    const auto equals = word.find('=');
    const CLI::Option* option = find(word.substr(0, equals));
    if (option != nullptr && takes_value(option) && equals == std::string::npos) span = 2;
  } else {
    // Grouped short options (-nq), the last of which may take a value, attached (-w5) or not.
    for (std::size_t c = 1; c < word.size(); ++c) {
      const CLI::Option* option = find(std::string{'-', word[c]});
      if (option == nullptr) break;
      if (takes_value(option)) {
        if (c + 1 == word.size()) span = 2;
        break;
      }
    }
  }
  return std::min(span, words.size() - i);
}

// The first word at or after `from` that is no option nor option value (or words.size()); stops
// at "--".
std::size_t skip_options(const CLI::App& app, const CLI::App& command, const Words& words, std::size_t from) {
  std::size_t i = from;
  while (i < words.size() && looks_like_option(words[i])) i += option_span(app, command, words, i);
  return i;
}

}  // namespace

void arrange_run_arguments(const CLI::App& app, Words& args) {
  const std::size_t name = skip_options(app, app, args, 1);
  if (name >= args.size() || args[name] != "run") return;
  const CLI::App& run = *app.get_subcommand("run");
  const std::size_t key = skip_options(app, run, args, name + 1);
  if (key >= args.size() || args[key] == "--" || key + 1 >= args.size()) return;
  const std::size_t first = key + 1;  // where the command starts, as in flock
  const auto end_of_options = std::find(args.begin() + static_cast<std::ptrdiff_t>(first), args.end(), "--");
  if (end_of_options != args.end()) {
    // Up to the "--": dlock's options, and more keys (`dlock run A B -- CMD`, which CLI11 reads
    // as `dlock run --key B A -- CMD`).
    const auto dashes = static_cast<std::size_t>(end_of_options - args.begin());
    Words arranged(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(key));
    for (std::size_t i = first; i < dashes;) {
      if (looks_like_option(args[i])) {
        const std::size_t span = std::min(option_span(app, run, args, i), dashes - i);
        arranged.insert(arranged.end(), args.begin() + static_cast<std::ptrdiff_t>(i),
                        args.begin() + static_cast<std::ptrdiff_t>(i + span));
        i += span;
      } else {
        arranged.push_back("--key");
        arranged.push_back(args[i++]);
      }
    }
    arranged.push_back(args[key]);
    arranged.insert(arranged.end(), end_of_options, args.end());
    args = std::move(arranged);
    return;
  }
  if (!looks_like_option(args[first])) return;

  const std::string& option = args[first];
  if (option == "-c" || option == "--command") {  // flock's form: KEY -c 'STRING'
    if (first + 2 != args.size()) {
      throw InvalidArgument(fmt::format(
          "{0} takes exactly one argument, the whole command as one string: dlock run {1} {0} 'COMMAND ARGS...'",
          option, args[key]));
    }
    std::rotate(args.begin() + static_cast<std::ptrdiff_t>(key), args.begin() + static_cast<std::ptrdiff_t>(first),
                args.end());
    return;
  }
  throw InvalidArgument(fmt::format(
      "'{0}' comes after the key '{1}', where the command starts, and no '--' ends dlock's options: put them "
      "before the key (dlock run {0} ... {1} COMMAND), or end them with '--' (dlock run {1} {0} ... -- COMMAND)",
      option, args[key]));
}

}  // namespace dlock::cli
