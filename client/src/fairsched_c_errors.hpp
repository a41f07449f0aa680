// The C ABI's error reporting, shared by the fairsched_c*.cpp files and
// defined in fairsched_c_errors.cpp: each failing call leaves its message
// for fairsched_last_error_message() on the calling thread.
#pragma once

#include "fairsched/error.hpp"
#include "fairsched/fairsched.h"

namespace fairsched::c_abi {

// Records `e`'s message and returns its C code.
fairsched_error fail(const Error& e);
// Records "invalid argument: <what>" and returns FAIRSCHED_ERR_INVALID_ARGUMENT.
fairsched_error invalid(const char* what);

}  // namespace fairsched::c_abi
