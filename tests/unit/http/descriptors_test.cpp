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
  SUBCASE("X_Tenant: X-Tenant to CGI-style upstreams, another field to others: refused") {
    // Alone, it was read as X-Tenant: a budget per made-up value where Express or Go serve
    // the request with no tenant. Beside X-Tenant, the name sent twice.
    const fields_of underscore{{"X_Tenant", "acme"}};
    CHECK(f.resolve({.fields = &underscore}).refused ==
          "the x-tenant header names the client spelled with '_' for '-' (or '-' for '_'), "
          "which some applications read as it and others do not");
    const fields_of both{{"X-Tenant", "globex"}, {"X_TENANT", "acme"}};
    CHECK_FALSE(f.resolve({.fields = &both}).refused.empty());
  }
}

// The refusal of a query:tenant the applications behind would read differently.
std::string tenant_refused(const std::string& why) {
  return "the query parameter tenant names the client " + why;
}
const std::string k_look_alike =
    "spelled in a way some applications read as its name and others do not";

TEST_CASE("query:NAME reads the decoded parameter, as the application does") {
  fixture f("identify_by: [query:tenant, ip]");
  const auto a = f.resolve({.query = "tenant=acme"});
  CHECK(a.source == identity_source::query);
  CHECK(a.subject.starts_with("query:tenant="));
  CHECK(f.resolve({.query = "x=1&tenant=%61cme&y"}).subject == a.subject);
  CHECK(f.resolve({.query = "t%65nant=acme"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant=ACME"}).subject != a.subject);
  CHECK(f.resolve({.query = "tenant=a+b"}).subject == f.resolve({.query = "tenant=a%20b"}).subject);
  CHECK(f.resolve({.query = "tenant=100%"}).subject != a.subject);       // a lone % stays as it is
  CHECK(f.resolve({.query = "tenant=caf%C3%A9"}).subject != a.subject);  // UTF-8 is fine
  CHECK(f.resolve({.query = "tenant="}).subject == "ip:203.0.113.9");
  CHECK(f.resolve({.query = "tenants=acme"}).subject == "ip:203.0.113.9");
  CHECK(f.resolve({.query = "tenant=acme&tenant=acme"}).refused ==
        "the query parameter tenant names the client and was sent more than once");
  CHECK(f.resolve({.query = "tenant=acme&%74enant=globex"}).refused.size() > 0);
  // A ';' in tenant's pair: Rack 2 cuts there, Express, Django and PHP read "a" as
  // "1;tenant=s1" (no tenant) and tenant as "acme;x=1", Go drops the pair.
  const std::string semicolon = tenant_refused(
      "in a pair with a ';', which some applications read as a separator, others "
      "as part of the value and Go's as an error");
  for (const char* query : {"a=1;tenant=s1", "a=1&b=2;tenant=s1", "a=1;%74enant=s1", ";tenant=s1",
                            "tenant=acme;x=1", "tenant=g1;", "tenant=x1;tenant=acme"}) {
    CAPTURE(query);
    CHECK(f.resolve({.query = query}).refused == semicolon);
  }
  CHECK(f.resolve({.query = "a=1;b=2&tenant=acme"}).subject == a.subject);
  // Names that some applications read as tenant and others not: ASP.NET reads TENANT as
  // tenant, Express, Django, PHP and Go do not; each would be a budget per made-up value.
  CHECK(f.resolve({.query = "TENANT=acme"}).refused == tenant_refused(k_look_alike));
  CHECK(f.resolve({.query = "[Tenant]=acme"}).refused == tenant_refused(k_look_alike));
  CHECK(f.resolve({.query = "tenant=acme&Tenant=globex"}).refused.size() > 0);
  // Express's qs and PHP read the first 1000 parameters (qs counting empty ones).
  const std::string past =
      tenant_refused("past the 1000th parameter, which Express and PHP do not read");
  std::string filler;
  for (int i = 0; i < 1000; ++i) {
    filler += "a=&";
  }
  CHECK(f.resolve({.query = filler + "tenant=p1"}).refused == past);
  CHECK(f.resolve({.query = std::string(1000, '&') + "tenant=p1"}).refused == past);
  CHECK(f.resolve({.query = std::string(999, '&') + "tenant=acme"}).subject == a.subject);
  // Not UTF-8 once decoded: Django and Node's querystring read every bad byte as U+FFFD (many
  // spellings, one tenant), qs and Werkzeug keep the escape ("m%FF" is "m%25FF" to them).
  const std::string not_utf8 = tenant_refused(
      "with a value that is not UTF-8 once decoded, which applications read in different ways");
  for (const char* query :
       {"tenant=acme%FF", "tenant=acme%FE", "tenant=acme%80", "tenant=acme%C3", "tenant=acme%E1%80",
        "tenant=acme%F1%80%80", "tenant=%C0%80", "tenant=%ED%A0%80", "tenant=%F4%90%80%80"}) {
    CAPTURE(query);
    CHECK(f.resolve({.query = query}).refused == not_utf8);
  }
}

TEST_CASE("query:NAME: a name PHP reads as NAME is refused, so PHP cannot act for another") {
  // php_register_variable_ex drops leading spaces, cuts at a NUL, makes ' ' and '.' '_', and
  // files "tenant[x]" under tenant; the last of two wins there, the first elsewhere. Read as
  // tenant_id, such a name beside tenant_id was a second value; alone, a tenant Express and
  // Django never saw.
  fixture f("identify_by: [query:tenant_id, ip]");
  const auto a = f.resolve({.query = "tenant_id=acme"});
  // PHP 8 also makes an unclosed '[' and every ' ', '.' and '[' after it '_'; Express's qs reads
  // "[tenant_id]" as tenant_id.
  const std::string refused =
      "the query parameter tenant_id names the client spelled in a way some applications read "
      "as its name and others do not";
  for (const char* spelling :
       {"tenant.id", "tenant+id", "+tenant_id", "%20tenant_id", "tenant_id%00x", "tenant_id[]",
        "tenant_id[x]", "tenant.id[0]", "tenant[id", "tenant%5Bid", "[tenant_id]"}) {
    CAPTURE(spelling);
    CHECK(f.resolve({.query = std::string(spelling) + "=acme"}).refused == refused);
    CHECK(f.resolve({.query = "tenant_id=acme&" + std::string(spelling) + "=globex"}).refused ==
          refused);
  }
  // Not the same name to anyone.
  CHECK(f.resolve({.query = "tenant_id=acme&tenantid=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant-id=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant_id2=globex"}).subject == a.subject);
  CHECK(f.resolve({.query = "tenant_id=acme&tenant_id[=globex"}).subject == a.subject);
}

TEST_CASE("query:NAME: a name Rack reads as NAME is refused, so Rails cannot act for another") {
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
    CHECK(f.resolve({.query = std::string(spelling) + "=acme"}).refused ==
          tenant_refused(k_look_alike));
    CHECK(f.resolve({.query = "tenant=f1&" + std::string(spelling) + "=victim"}).refused ==
          tenant_refused(k_look_alike));
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
  // ASP.NET reads names in any case, Express and Django do not: SESSION is refused, a budget
  // per made-up value where they serve no session.
  const fields_of upper{{"Cookie", "SESSION=s1"}};
  CHECK(f.resolve({.fields = &upper}).refused ==
        "the cookie session names the client spelled in a way some applications read as its "
        "name and others do not");
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

TEST_CASE("cookie:NAME: a cookie PHP reads as NAME is refused") {
  // PHP reads these as session_id, Express and Django as other cookies: alone, each made-up
  // value was a budget where they serve no session; beside session_id, a second value.
  fixture f("identify_by: [cookie:session_id, ip]");
  const std::string refused =
      "the cookie session_id names the client spelled in a way some applications read as its "
      "name and others do not";
  for (const char* name : {"session.id", "session%2Eid", "session_id[]", "session%5Fid"}) {
    CAPTURE(name);
    const fields_of alone{{"Cookie", std::string(name) + "=s1"}};
    CHECK(f.resolve({.fields = &alone}).refused == refused);
    const fields_of both{{"Cookie", "session_id=s1; " + std::string(name) + "=s2"}};
    CHECK(f.resolve({.fields = &both}).refused == refused);
  }
  // Not UTF-8 once decoded: PHP reads a byte, Express and Django the escape.
  for (const char* value : {"k%FF", "k%C3", "%C0%80"}) {
    CAPTURE(value);
    const fields_of bad{{"Cookie", std::string("session_id=") + value}};
    CHECK(f.resolve({.fields = &bad}).refused ==
          "the cookie session_id names the client with a value that is not UTF-8 once decoded, "
          "which applications read in different ways");
  }
  const fields_of utf8{{"Cookie", "session_id=caf%C3%A9"}};
  CHECK(f.resolve({.fields = &utf8}).refused.empty());
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
  // A segment of matrix parameters only names no one: the IP does, as the last resort.
  const auto none = f.resolve({.path = "/tenants/;v=1/items/1"});
  CHECK(none.source == identity_source::ip);
  CHECK(none.subject == f.resolve({.path = "/tenants/;v=2/items/1"}).subject);
  CHECK(none.subject != a.subject);
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
