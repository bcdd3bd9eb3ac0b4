// steptrace/details/session.hpp - the running session, whole: Session's class (session_decl.hpp) and
// what start() sets up beside it (session_setup.hpp). Include this one.
#pragma once
#include "session_decl.hpp"
#include "session_setup.hpp"
