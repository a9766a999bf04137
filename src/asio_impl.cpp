// The one translation unit that compiles Asio (with its TLS layer) and Beast (separate compilation keeps every
// other file from instantiating them again).
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
