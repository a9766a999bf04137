// identify_by descriptors (DESIGN §5b): header, query, cookie and path sources and composites,
// read through the config loader as an operator writes them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/http/identity.hpp"

using namespace ratewall;

namespace {

/// Header fields as a test writes them: (name, value) in order, names compared ignoring case.
class fields_of final : public request_fields {
 public:
  fields_of(std::initializer_list<std::pair<std::string, std::string>> f) : fields_(f) {}
  std::optional<std::string_view> value(std::string_view name, std::size_t index) const override {
    for (const auto& [n, v] : fields_) {
      if (n.size() == name.size() &&
          std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == b;
          })) {
        if (index-- == 0) {
          return std::string_view(v);
        }
      }
    }
    return std::nullopt;
  }
  std::size_t count_like(std::string_view name, std::string_view& first) const override {
    std::size_t count = 0;
    for (const auto& [n, v] : fields_) {
      std::string normal;
      for (char c : n) {
        normal += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      std::string wanted(name);
      std::replace(wanted.begin(), wanted.end(), '_', '-');
      if (normal == wanted && count++ == 0) {
        first = v;
      }
    }
    return count;
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// A gateway's identity for one route whose identify_by (and match) are `route_yaml`.
struct fixture {
  explicit fixture(const std::string& route_yaml)
      : cfg(parse_config(R"(identity:
  trusted_proxies: [10.0.0.0/8]
  unknown_api_key: reject
plans: { premium: {} }
api_keys:
  - { key_sha256: )" + to_hex(sha256("good-key")) +
                             R"(, plan: premium, name: acme-co }
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    )" + route_yaml + "\n",
                         "test.yaml")),
        resolver(cfg, "hash-key") {}

  identity_result resolve(identity_input in) const {
    if (in.peer_ip.empty()) {
      in.peer_ip = "203.0.113.9";
    }
    return resolver.resolve(cfg.routes.front(), in);
  }

  config cfg;
  identity_resolver resolver;
};

}  // namespace

TEST_CASE("header:NAME names the client by that field, hashed, and refuses it sent twice") {
  fixture f("identify_by: [header:X-Tenant, ip]");
  const fields_of acme{{"x-tenant", "acme"}};
  const fields_of acme_spaced{{"X-TENANT", "  acme "}};
  const fields_of other{{"X-Tenant", "globex"}};
  const auto a = f.resolve({.fields = &acme});
  CHECK(a.source == identity_source::header);
  CHECK(a.subject.starts_with("header:x-tenant="));
  CHECK(a.subject.size() == std::string("header:x-tenant=").size() + 32);
  CHECK(a.subject.find("acme") == std::string::npos);  // never in clear
  CHECK(a.plan.empty());
  CHECK(f.resolve({.peer_ip = "198.51.100.1", .fields = &acme_spaced}).subject == a.subject);
  CHECK(f.resolve({.fields = &other}).subject != a.subject);

  SUBCASE("absent or empty: the next source") {
    const fields_of empty{{"X-Tenant", ""}};
    CHECK(f.resolve({.fields = &empty}).subject == "ip:203.0.113.9");
    CHECK(f.resolve({}).subject == "ip:203.0.113.9");
  }
  SUBCASE("twice: refused, whatever the values (the upstream may read either)") {
    const fields_of twice{{"X-Tenant", "acme"}, {"x-tenant", "acme"}};
    const auto r = f.resolve({.fields = &twice});
    CHECK(r.refused == "the x-tenant header names the client and was sent more than once");
    CHECK(r.subject == "ip:203.0.113.9");
  }
  SUBCASE("X_Tenant is X-Tenant, as CGI-style upstreams read it") {
    const fields_of underscore{{"X_Tenant", "acme"}};
    CHECK(f.resolve({.fields = &underscore}).subject == a.subject);
    const fields_of both{{"X-Tenant", "globex"}, {"X_TENANT", "acme"}};
    CHECK_FALSE(f.resolve({.fields = &both}).refused.empty());
  }
}

TEST_CASE("query:NAME reads the decoded parameter, as the application does") {
  fixture f("identify_by: [query:tenant, ip]");
  const auto a = f.resolve({.query = "tenant=acme"});
  CHECK(a.source == identity_source::query);
  CHECK(a.subject.starts_with("query:tenant="));
  CHECK(f.resolve({.query = "x=1&tenant=%61cme&y"}).subject == a.subject);
  CHECK(f.resolve({.query = "t%65nant=acme"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant=ACME"}).subject != a.subject);
  CHECK(f.resolve({.query = "tenant=a+b"}).subject == f.resolve({.query = "tenant=a%20b"}).subject);
  CHECK(f.resolve({.query = "tenant=100%"}).subject != a.subject);  // a lone % stays as it is
  CHECK(f.resolve({.query = "tenant="}).subject == "ip:203.0.113.9");
  CHECK(f.resolve({.query = "tenants=acme"}).subject == "ip:203.0.113.9");
  CHECK(f.resolve({.query = "tenant=acme&tenant=acme"}).refused ==
        "the query parameter tenant names the client and was sent more than once");
  CHECK(f.resolve({.query = "tenant=acme&%74enant=globex"}).refused.size() > 0);
  // ';' separates pairs too (some frameworks read it so): a second tenant behind it is seen.
  CHECK(f.resolve({.query = "tenant=x1;tenant=acme"}).refused.size() > 0);
  CHECK(f.resolve({.query = "tenant=acme;x=1"}).subject == a.subject);
  // A tenant that only the cut at ';' finds is no tenant to Express, Django or PHP ("a" is
  // "1;tenant=s1" there): refused, not a budget per made-up value.
  for (const char* query :
       {"a=1;tenant=s1", "a=1&b=2;tenant=s1", "a=1;%74enant=s1", ";tenant=s1"}) {
    CAPTURE(query);
    CHECK(f.resolve({.query = query}).refused ==
          "the query parameter tenant names the client after a ';', which some applications "
          "read as a separator and others as part of the value before it");
  }
  CHECK(f.resolve({.query = "a=1;b=2&tenant=acme"}).subject == a.subject);
  // ASP.NET reads names in any case: TENANT is tenant, and beside it, the name sent twice.
  CHECK(f.resolve({.query = "TENANT=acme"}).subject == a.subject);
  CHECK(f.resolve({.query = "[Tenant]=acme"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant=acme&Tenant=globex"}).refused.size() > 0);
}

TEST_CASE("query:NAME: a name PHP reads as NAME is NAME, so PHP cannot act for another") {
  // php_register_variable_ex drops leading spaces, cuts at a NUL, makes ' ' and '.' '_', and
  // files "tenant[x]" under tenant; the last of two wins there, the first elsewhere.
  fixture f("identify_by: [query:tenant_id, ip]");
  const auto a = f.resolve({.query = "tenant_id=acme"});
  // PHP 8 also makes an unclosed '[' and every ' ', '.' and '[' after it '_'; Express's qs reads
  // "[tenant_id]" as tenant_id.
  for (const char* spelling :
       {"tenant.id", "tenant+id", "+tenant_id", "%20tenant_id", "tenant_id%00x", "tenant_id[]",
        "tenant_id[x]", "tenant.id[0]", "tenant[id", "tenant%5Bid", "[tenant_id]"}) {
    CAPTURE(spelling);
    CHECK(f.resolve({.query = std::string(spelling) + "=acme"}).subject == a.subject);
    CHECK(f.resolve({.query = "tenant_id=acme&" + std::string(spelling) + "=globex"}).refused ==
          "the query parameter tenant_id names the client and was sent more than once");
  }
  // Not the same name to anyone.
  CHECK(f.resolve({.query = "tenant_id=acme&tenantid=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant-id=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant_id2=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant_id[=globex"}).subject == a.subject);
}

TEST_CASE("query:NAME: a name Rack reads as NAME is NAME, so Rails cannot act for another") {
  // Rack 2.2's normalize_params drops '[' and ']' before the name and ']' after it, and the
  // last of two wins there: "tenant=f1&tenant%5D=victim" was charged to f1 and served as victim.
  fixture f("identify_by: [query:tenant, ip]");
  const auto a = f.resolve({.query = "tenant=acme"});
  // Express's qs reads a name that opens with "[tenant]" as tenant whatever follows it
  // ("[tenant][", "[tenant]]["), where Rack keeps the whole name.
  for (const char* spelling :
       {"tenant]", "tenant%5D", "]tenant", "[tenant", "[]tenant", "[[tenant]]", "tenant]]",
        "]]tenant[x]", "tenant]x", "Tenant]", "[tenant][", "%5Btenant%5D%5B", "[tenant]]["}) {
    CAPTURE(spelling);
    CHECK(f.resolve({.query = std::string(spelling) + "=acme"}).subject == a.subject);
    CHECK(f.resolve({.query = "tenant=f1&" + std::string(spelling) + "=victim"}).refused ==
          "the query parameter tenant names the client and was sent more than once");
  }
  // A bracket left open keeps the whole name to Rack; other names stay other names.
  for (const char* other : {"tenant][", "]tenant[", "tenants]", "[tenantx]", "[]", "]"}) {
    CAPTURE(other);
    CHECK(f.resolve({.query = "tenant=acme&" + std::string(other) + "=globex"}).subject ==
          a.subject);
  }
}

TEST_CASE("cookie:NAME reads the first cookie of that name") {
  fixture f("identify_by: [cookie:session, ip]");
  const fields_of one{{"Cookie", "theme=dark; session=s1; lang=en"}};
  const fields_of two_lines{{"Cookie", "theme=dark"}, {"Cookie", "session=s1"}};
  const fields_of duplicate{{"Cookie", "session=s1; session=s1"}};
  const fields_of quoted{{"Cookie", "session=\"s1\""}};
  const fields_of encoded{{"Cookie", "session=%731"}};
  const fields_of other{{"Cookie", "session=s2"}};
  const fields_of empty{{"Cookie", "session=; x=1"}};
  const fields_of prefix_only{{"Cookie", "sessions=s1; xsession=s1"}};
  const auto a = f.resolve({.fields = &one});
  CHECK(a.source == identity_source::cookie);
  CHECK(a.subject.starts_with("cookie:session="));
  CHECK(f.resolve({.fields = &two_lines}).subject == a.subject);
  CHECK(f.resolve({.fields = &duplicate}).subject == a.subject);
  CHECK(f.resolve({.fields = &quoted}).subject == a.subject);
  CHECK(f.resolve({.fields = &encoded}).subject == a.subject);
  CHECK(f.resolve({.fields = &other}).subject != a.subject);
  // Two different values: frameworks differ on which they keep, so the request is refused.
  const fields_of conflicting{{"Cookie", "session=s1"}, {"Cookie", "theme=x; session=s2"}};
  CHECK(f.resolve({.fields = &conflicting}).refused ==
        "the cookie session names the client and was sent more than once with different values");
  CHECK(f.resolve({.fields = &empty}).subject == "ip:203.0.113.9");
  CHECK(f.resolve({.fields = &prefix_only}).subject == "ip:203.0.113.9");
  // ASP.NET reads names in any case: SESSION is session, and beside it, the name sent twice.
  const fields_of upper{{"Cookie", "SESSION=s1"}};
  CHECK(f.resolve({.fields = &upper}).subject == a.subject);
  const fields_of both{{"Cookie", "session=s1; Session=s2"}};
  CHECK_FALSE(f.resolve({.fields = &both}).refused.empty());
  // Rack and PHP read '+' as a space, Express as '+': every spelling of either is one value.
  const fields_of plus{{"Cookie", "session=ab+cd"}};
  const fields_of space{{"Cookie", "session=ab%20cd"}};
  const fields_of encoded_plus{{"Cookie", "session=ab%2Bcd"}};
  const fields_of quoted_space{{"Cookie", "session=\"ab cd\""}};
  const fields_of mixed{{"Cookie", "session=ab+cd; session=ab%20cd"}};
  const auto p = f.resolve({.fields = &plus});
  CHECK(p.subject != a.subject);
  CHECK(f.resolve({.fields = &space}).subject == p.subject);
  CHECK(f.resolve({.fields = &encoded_plus}).subject == p.subject);
  CHECK(f.resolve({.fields = &quoted_space}).subject == p.subject);
  CHECK(f.resolve({.fields = &mixed}).subject == p.subject);
  // Django's strip() drops NEL and NO-BREAK SPACE (the field read as Latin-1), Express's
  // trim() the latter: around a name or a value they are blanks.
  for (const char* line :
       {"session=s1\xA0", "session=\xA0s1", "session=s1\x85", "session=s1\xA0\xA0",
        "\xA0session=s1", "x=1;\xA0session=s1", "session\x85=s1"}) {
    CAPTURE(line);
    const fields_of padded{{"Cookie", line}};
    CHECK(f.resolve({.fields = &padded}).subject == a.subject);
  }
  const fields_of padded_twice{{"Cookie", "session=r1; \xA0session=s1"}};
  CHECK_FALSE(f.resolve({.fields = &padded_twice}).refused.empty());
  const fields_of inside{{"Cookie",
                          "session=s\xA0"
                          "1"}};
  CHECK(f.resolve({.fields = &inside}).subject != a.subject);
}

TEST_CASE("cookie:NAME: a value quoted so that applications disagree is refused") {
  // Python's http.cookies (Django) and Werkzeug undo backslash escapes inside quotes
  // ("\\141ttacker" is attacker), Express's cookie module keeps them, and drops the first and
  // last characters of any value that starts with '"': no reading of these is every
  // application's, and each spelling would have been a budget of its own.
  fixture f("identify_by: [cookie:session, ip]");
  const fields_of plain{{"Cookie", "session=attacker"}};
  const fields_of quoted{{"Cookie", R"(session="attacker")"}};
  CHECK(f.resolve({.fields = &quoted}).subject == f.resolve({.fields = &plain}).subject);
  for (const char* spelling :
       {R"("\attacker")", R"("\141ttacker")", R"("attack\er")", R"("attacker\")", R"("attackerZ)",
        R"(")", R"("attacker""x)", R"("attack"er")"}) {
    CAPTURE(spelling);
    const fields_of odd{{"Cookie", std::string("session=") + spelling}};
    CHECK(f.resolve({.fields = &odd}).refused ==
          "the cookie session names the client and is quoted so that applications read it "
          "differently (an unclosed quote, or a backslash inside quotes)");
  }
  // Unquoted, a backslash is a character like any other (no framework unescapes it there).
  const fields_of bare{{"Cookie", R"(session=\attacker)"}};
  CHECK(f.resolve({.fields = &bare}).refused.empty());
  CHECK(f.resolve({.fields = &bare}).subject != f.resolve({.fields = &plain}).subject);
}

TEST_CASE("cookie:NAME: the name again after a space or comma inside a pair is refused") {
  // Python's http.cookies ends a pair at whitespace and after a comma: to it each of these
  // sends session=victim (the last one wins), while a reader that splits at ';' sees a value.
  fixture f("identify_by: [cookie:session, ip]");
  for (const char* line :
       {"session=junk1; x=1 session=victim", "x=1, session=victim",
        "session=junk2; x=1,session =victim", "x=a\tsession=victim", "junk session=victim",
        // in any spelling that reads as the name here (names are alike in any case)
        "x=1,Session=victim", "x=1 SESSION=victim", "x=a\tSeSsIoN=victim", "x=1 %73ession=victim",
        "x=1 2 ,  Session \t=victim"}) {
    CAPTURE(line);
    const fields_of odd{{"Cookie", line}};
    CHECK(f.resolve({.fields = &odd}).refused ==
          "the cookie session names the client and follows a space or comma inside another "
          "cookie, where some applications read it and others do not");
  }
  // Spaces elsewhere, or another name that ends or starts alike, hide nothing.
  for (const char* line : {"theme=dark mode; session=s1", "session=s1; x=a xsession=b",
                           "session=s1; x=a sessions=b", "session=s1; x=the session"}) {
    CAPTURE(line);
    const fields_of fine{{"Cookie", line}};
    const auto r = f.resolve({.fields = &fine});
    CHECK(r.refused.empty());
    CHECK(r.source == identity_source::cookie);
  }
}

TEST_CASE("cookie:NAME: a value with a blank or a comma in it is refused") {
  // Python's http.cookies ends an unquoted value at a blank, ASP.NET Core's and Rack's readers
  // end any value at a comma: to them each of these is session=victim, while a reader that
  // ends it at ';' (Express, the gateway) sees a new value each time.
  fixture f("identify_by: [cookie:session, ip]");
  for (const char* line :
       {"session=victim x0=1", "session=victim\tx1=1", "session=victim,x2=1", "session=victim junk",
        R"(session="victim,x3=1")", "x=1; session=victim y=2; z=3"}) {
    CAPTURE(line);
    const fields_of odd{{"Cookie", line}};
    CHECK(f.resolve({.fields = &odd}).refused ==
          "the cookie session names the client and its value holds a blank or a comma, where "
          "some applications end it and others do not");
  }
  // Blanks around the value are not in it; inside quotes every reader keeps them; another
  // cookie's blanks and commas are that cookie's.
  for (const char* line : {"session=victim ; x=1", "session= victim", R"(session="vic tim")",
                           "theme=dark mode,wide; session=victim"}) {
    CAPTURE(line);
    const fields_of fine{{"Cookie", line}};
    const auto r = f.resolve({.fields = &fine});
    CHECK(r.refused.empty());
    CHECK(r.source == identity_source::cookie);
  }
}

TEST_CASE("cookie:NAME: a cookie PHP reads as NAME is NAME") {
  fixture f("identify_by: [cookie:session_id, ip]");
  const fields_of plain{{"Cookie", "session_id=s1"}};
  const auto a = f.resolve({.fields = &plain});
  for (const char* name : {"session.id", "session%2Eid", "session_id[]", "session%5Fid"}) {
    CAPTURE(name);
    const fields_of alone{{"Cookie", std::string(name) + "=s1"}};
    CHECK(f.resolve({.fields = &alone}).subject == a.subject);
    const fields_of both{{"Cookie", "session_id=s1; " + std::string(name) + "=s2"}};
    CHECK(f.resolve({.fields = &both}).refused ==
          "the cookie session_id names the client and was sent more than once with different "
          "values");
  }
}

TEST_CASE("path:NAME reads its segment of the template") {
  fixture f(R"(match: { path_template: "/tenants/{tenant}/items/{item}" }
    identify_by: [path:tenant])");
  const auto a = f.resolve({.path = "/tenants/acme/items/1"});
  CHECK(a.source == identity_source::path);
  CHECK(a.subject.starts_with("path:tenant="));
  CHECK(f.resolve({.path = "/tenants/acme/items/2"}).subject == a.subject);
  CHECK(f.resolve({.path = "/tenants/globex/items/1"}).subject != a.subject);
  CHECK(f.cfg.routes.front().identify_by.front().parts.front().segment == 1u);
  // Matrix parameters are not part of the name; %XX is decoded.
  CHECK(f.resolve({.path = "/tenants/acme;v=1/items/1"}).subject == a.subject);
  CHECK(f.resolve({.path = "/tenants/a%40b/items/1"}).subject ==
        f.resolve({.path = "/tenants/a@b/items/1"}).subject);
  CHECK(f.resolve({.path = "/tenants/ACME/items/1"}).subject != a.subject);
}

TEST_CASE("path:NAME on a route that ignores case names ACME and acme alike") {
  fixture f(R"(match: { path_template: "/tenants/{tenant}", case_insensitive: true }
    identify_by: [path:tenant])");
  CHECK(f.resolve({.path = "/tenants/ACME"}).subject ==
        f.resolve({.path = "/tenants/acme"}).subject);
}

TEST_CASE("a composite names one client from all of its parts, present only with all") {
  fixture f("identify_by: [[header:X-Tenant, ip], [api_key, query:project], ip]");
  const fields_of acme{{"X-Tenant", "acme"}};
  const auto a = f.resolve({.fields = &acme});
  CHECK(a.source == identity_source::header);
  CHECK(a.subject.starts_with("header:x-tenant+ip="));
  CHECK(f.resolve({.peer_ip = "203.0.113.10", .fields = &acme}).subject != a.subject);
  CHECK(f.resolve({.fields = &acme}).subject == a.subject);
  // Without the header, the next composite: a declared key and a project give the key's plan.
  const auto k = f.resolve({.api_key = "good-key", .query = "project=p1"});
  CHECK(k.source == identity_source::api_key);
  CHECK(k.subject.starts_with("api_key+query:project="));
  CHECK(k.plan == "premium");
  CHECK(k.key_name == "acme-co");
  CHECK(f.resolve({.api_key = "good-key", .query = "project=p2"}).subject != k.subject);
  // A key without the project: that composite is absent, the IP names the client, and neither
  // the key's plan nor its name (the access log's "key") is the client's.
  const auto ip = f.resolve({.api_key = "good-key"});
  CHECK(ip.subject == "ip:203.0.113.9");
  CHECK(ip.plan.empty());
  CHECK(ip.key_name.empty());
  // An unknown key under unknown_api_key: reject is refused in a composite too.
  const auto bad = f.resolve({.api_key = "made-up", .query = "project=p1"});
  CHECK(bad.rejected);
  CHECK(bad.subject == "ip:203.0.113.9");
}

TEST_CASE("descriptors with the same values never share a subject") {
  fixture f("identify_by: [header:a, query:a, cookie:a, [header:a, query:a]]");
  const fields_of h{{"a", "v"}};
  const fields_of c{{"Cookie", "a=v"}};
  const auto by_header = f.resolve({.fields = &h});
  const auto by_query = f.resolve({.query = "a=v"});
  const auto by_cookie = f.resolve({.fields = &c});
  CHECK(by_header.subject != by_query.subject);
  CHECK(by_query.subject != by_cookie.subject);
  CHECK(by_header.subject.substr(by_header.subject.find('=')) !=
        by_query.subject.substr(by_query.subject.find('=')));
}

TEST_CASE("the default identify_by is unchanged: api_key, user, ip") {
  fixture f("match: { path_prefix: / }");
  CHECK(f.resolve({.api_key = "good-key"}).subject.starts_with("key:"));
  CHECK(f.resolve({.peer_ip = "10.0.0.1", .user = "alice"}).subject.starts_with("user:"));
  CHECK(f.resolve({}).subject == "ip:203.0.113.9");
}

TEST_CASE("user: a trusted proxy's user header, in any spelling, once; sent twice it is refused") {
  // The header names the client as the API key does: the gateway and the upstream must read
  // the same one (X_User_ID is X-User-ID to a CGI-style upstream).
  fixture f("identify_by: [user, ip]");
  const fields_of alice{{"X-User-ID", "alice"}};
  const auto a = f.resolve({.peer_ip = "10.0.0.1", .user = "alice", .fields = &alice});
  CHECK(a.source == identity_source::user);
  const fields_of underscore{{"X_User_ID", " alice "}};
  CHECK(f.resolve({.peer_ip = "10.0.0.1", .fields = &underscore}).subject == a.subject);
  const fields_of twice{{"X-User-ID", "alice"}, {"x-user-id", "mallory"}};
  const auto r = f.resolve({.peer_ip = "10.0.0.1", .user = "alice", .fields = &twice});
  CHECK(r.refused == "the x-user-id header names the client and was sent more than once");
  CHECK(r.subject == "ip:10.0.0.1");
  // From a peer that is no trusted proxy the header is not read, so not refused either.
  const auto untrusted = f.resolve({.user = "alice", .fields = &twice});
  CHECK(untrusted.refused.empty());
  CHECK(untrusted.subject == "ip:203.0.113.9");
}
