#pragma once

// Row mode (mysql://…?mode=row) locks rows of the user's own table, so the conformance suite
// makes that table and a row for every key it uses; server tests drop the tables they made.

#include <initializer_list>
#include <string>

namespace dlock::test {

// Creates `table` (id, data and the five lock columns) in the database of `url`.
void create_row_table(const std::string& url, const std::string& table);
// Inserts the row for `key` unless it exists.
void insert_row(const std::string& url, const std::string& table, const std::string& key);
// Drops the tables that exist of `tables`.
void drop_tables(const std::string& url, std::initializer_list<std::string> tables);

}  // namespace dlock::test
