#pragma once

namespace dlock::cli {

// The admin page, a complete HTML document (src/cli/admin_page.cpp).
extern const char* const kAdminPage;

}  // namespace dlock::cli
