#pragma once

// Row mode (mysql://…?mode=row) locks rows of the user's own table, so the conformance suite
// makes that table and a row for every key it uses. Server tests also look at and clean up
// their tables here.

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace dlock::test {

// Creates `table` (id, data and the five lock columns) in the database of `url`.
void create_row_table(const std::string& url, const std::string& table);
// Inserts the row for `key` unless it exists.
void insert_row(const std::string& url, const std::string& table, const std::string& key);
// Drops the tables that exist of `tables`.
void drop_tables(const std::string& url, std::initializer_list<std::string> tables);
// Runs a SELECT as the user of `url` and returns its rows (NULL as nothing).
std::vector<std::vector<std::optional<std::string>>> select_rows(const std::string& url, const std::string& sql);
// Runs a statement without parameters or rows (KILL, DDL) as the user of `url`.
void run_statement(const std::string& url, const std::string& sql);

}  // namespace dlock::test
