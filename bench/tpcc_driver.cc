// mapfs-tpcc: a TPC-C-like transaction mix on SQLite (Debian's libsqlite3),
// run by `mapfs bench sqlite` natively on tmpfs and under `mapfs run`, so the
// same binary measures both. It knows nothing of mapfs.
//
//   mapfs-tpcc DB wal|rollback WAREHOUSES TRANSACTIONS
//
// Prints "PHASE COUNT NANOSECONDS" lines: "load" (rows loaded), "mix" (all
// transactions) and one per transaction type (its count and the time spent
// in it). Exit status 1 on any SQLite error.
//
// Schema: TPC-C's nine tables with the columns the transactions touch:
// warehouse, district (10 per warehouse), customer (300 per district;
// TPC-C has 3,000), item (10,000; TPC-C 100,000), stock (one per item and
// warehouse), orders (300 per district at load, one per customer),
// new_order (the last 90 of them), order_line (5..15 per order), history.
// Text columns are filled to TPC-C-like lengths (customer data 300 bytes,
// stock data 50) so rows and pages have realistic sizes.
//
// Mix (TPC-C's minimum percentages, keys uniform, fixed seed so every run
// issues the same transactions):
//   45 % new-order     read warehouse/district/customer, bump d_next_o_id,
//                      insert orders + new_order, per line (5..15): read item,
//                      update stock, insert order_line; 1 % roll back
//                      (unused item), as TPC-C specifies
//   43 % payment       update warehouse, district and customer (60 % found
//                      by last name), insert history
//    4 % order-status  a customer's latest order and its lines (read only)
//    4 % delivery      for each of the 10 districts: oldest new_order deleted,
//                      order's carrier and lines' delivery date set, customer
//                      balance credited
//    4 % stock-level   distinct items of the district's last 20 orders whose
//                      stock is under a threshold (read only)
//
// Journal modes: "wal" is PRAGMA journal_mode=WAL, "rollback" is DELETE (the
// rollback journal, created and deleted per transaction); both with
// synchronous=FULL, so every commit calls fsync.
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kDistricts = 10, kCustomers = 300, kItems = 10000, kInitialOrders = 300, kNewOrders = 90;
// 100 last names, so a name matches about 3 customers of a district (as
// TPC-C's 1,000 names do among its 3,000).
constexpr int kLastNames = 100;

sqlite3* db = nullptr;
std::mt19937_64 rng(20261123);

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "mapfs-tpcc: %s: %s\n", what, db ? sqlite3_errmsg(db) : "no database");
  std::exit(1);
}

void Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::fprintf(stderr, "mapfs-tpcc: %s: %s\n", sql, err ? err : "?");
    std::exit(1);
  }
}

int64_t Rand(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

std::string Text(size_t n) {
  std::string s(n, 'a');
  for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

// TPC-C's customer last names: three syllables from a number 0..999.
std::string LastName(int n) {
  static const char* const syl[] = {"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"};
  return std::string(syl[n / 100]) + syl[(n / 10) % 10] + syl[n % 10];
}

// A prepared statement, reset and rebound for each use.
class Stmt {
 public:
  explicit Stmt(const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) Die(sql);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& Bind(std::initializer_list<int64_t> v) {
    sqlite3_reset(s_);
    int i = 1;
    for (int64_t x : v) sqlite3_bind_int64(s_, i++, x);
    next_ = i;
    return *this;
  }
  Stmt& BindText(const std::string& t) {
    sqlite3_bind_text(s_, next_++, t.data(), static_cast<int>(t.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindInt(int64_t v) {
    sqlite3_bind_int64(s_, next_++, v);
    return *this;
  }
  Stmt& BindDouble(double d) {
    sqlite3_bind_double(s_, next_++, d);
    return *this;
  }
  bool Step() {  // true while there is a row
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) Die(sqlite3_sql(s_));
    return false;
  }
  void Run() {
    while (Step()) {
    }
  }
  int64_t Int(int c) { return sqlite3_column_int64(s_, c); }
  double Double(int c) { return sqlite3_column_double(s_, c); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int next_ = 1;
};

const char* const kSchema =
    "CREATE TABLE warehouse(w_id INTEGER PRIMARY KEY, w_name TEXT, w_tax REAL, w_ytd REAL);"
    "CREATE TABLE district(d_w_id INT, d_id INT, d_name TEXT, d_tax REAL, d_ytd REAL, d_next_o_id INT,"
    " PRIMARY KEY(d_w_id, d_id));"
    "CREATE TABLE customer(c_w_id INT, c_d_id INT, c_id INT, c_first TEXT, c_last TEXT, c_discount REAL,"
    " c_balance REAL, c_ytd_payment REAL, c_payment_cnt INT, c_delivery_cnt INT, c_data TEXT,"
    " PRIMARY KEY(c_w_id, c_d_id, c_id));"
    "CREATE INDEX customer_last ON customer(c_w_id, c_d_id, c_last, c_first);"
    "CREATE TABLE item(i_id INTEGER PRIMARY KEY, i_name TEXT, i_price REAL, i_data TEXT);"
    "CREATE TABLE stock(s_w_id INT, s_i_id INT, s_quantity INT, s_ytd INT, s_order_cnt INT, s_remote_cnt INT,"
    " s_data TEXT, PRIMARY KEY(s_w_id, s_i_id));"
    "CREATE TABLE orders(o_w_id INT, o_d_id INT, o_id INT, o_c_id INT, o_entry_d INT, o_carrier_id INT,"
    " o_ol_cnt INT, PRIMARY KEY(o_w_id, o_d_id, o_id));"
    "CREATE INDEX orders_customer ON orders(o_w_id, o_d_id, o_c_id, o_id);"
    "CREATE TABLE new_order(no_w_id INT, no_d_id INT, no_o_id INT, PRIMARY KEY(no_w_id, no_d_id, no_o_id));"
    "CREATE TABLE order_line(ol_w_id INT, ol_d_id INT, ol_o_id INT, ol_number INT, ol_i_id INT,"
    " ol_supply_w_id INT, ol_quantity INT, ol_amount REAL, ol_delivery_d INT, ol_dist_info TEXT,"
    " PRIMARY KEY(ol_w_id, ol_d_id, ol_o_id, ol_number));"
    "CREATE TABLE history(h_c_id INT, h_c_d_id INT, h_c_w_id INT, h_d_id INT, h_w_id INT, h_date INT,"
    " h_amount REAL, h_data TEXT);";

uint64_t Load(int warehouses) {
  uint64_t rows = 0;
  Exec("BEGIN");
  Stmt item("INSERT INTO item VALUES(?,?,?,?)");
  for (int i = 1; i <= kItems; i++, rows++) item.Bind({i}).BindText(Text(20)).BindDouble(Rand(100, 10000) / 100.0).BindText(Text(40)).Run();
  Stmt wh("INSERT INTO warehouse VALUES(?,?,?,300000)"), st("INSERT INTO stock VALUES(?,?,?,0,0,0,?)");
  Stmt di("INSERT INTO district VALUES(?,?,?,?,30000,?)");
  Stmt cu("INSERT INTO customer VALUES(?,?,?,?,?,?,-10,10,1,0,?)");
  Stmt hi("INSERT INTO history VALUES(?,?,?,?,?,0,10,?)");
  Stmt od("INSERT INTO orders VALUES(?,?,?,?,0,?,?)"), no("INSERT INTO new_order VALUES(?,?,?)");
  Stmt ol("INSERT INTO order_line VALUES(?,?,?,?,?,?,5,?,?,?)");
  for (int w = 1; w <= warehouses; w++) {
    wh.Bind({w}).BindText(Text(10)).BindDouble(Rand(0, 2000) / 10000.0).Run(), rows++;
    for (int i = 1; i <= kItems; i++, rows++) st.Bind({w, i, Rand(10, 100)}).BindText(Text(50)).Run();
    for (int d = 1; d <= kDistricts; d++) {
      di.Bind({w, d}).BindText(Text(10)).BindDouble(Rand(0, 2000) / 10000.0).BindInt(kInitialOrders + 1).Run(), rows++;
      for (int c = 1; c <= kCustomers; c++, rows += 2) {
        cu.Bind({w, d, c}).BindText(Text(12)).BindText(LastName((c - 1) % kLastNames))
            .BindDouble(Rand(0, 5000) / 10000.0).BindText(Text(300)).Run();
        hi.Bind({c, d, w, d, w}).BindText(Text(20)).Run();
      }
      // Orders 1..300 for a permutation of the customers; the last 90 undelivered.
      std::vector<int> cust(kCustomers);
      for (int i = 0; i < kCustomers; i++) cust[i] = i + 1;
      std::shuffle(cust.begin(), cust.end(), rng);
      for (int o = 1; o <= kInitialOrders; o++, rows++) {
        bool delivered = o <= kInitialOrders - kNewOrders;
        int lines = static_cast<int>(Rand(5, 15));
        od.Bind({w, d, o, cust[o - 1], delivered ? Rand(1, 10) : 0, lines}).Run();
        if (!delivered) no.Bind({w, d, o}).Run(), rows++;
        for (int l = 1; l <= lines; l++, rows++)
          ol.Bind({w, d, o, l, Rand(1, kItems), w}).BindDouble(delivered ? 0 : Rand(1, 999999) / 100.0)
              .BindInt(delivered ? 1 : 0).BindText(Text(24)).Run();
      }
    }
  }
  Exec("COMMIT");
  return rows;
}

// A customer's id, found 60 % of the time by last name (the middle one of
// those with the name, ordered by first name) as TPC-C specifies.
int64_t PickCustomer(int64_t w, int64_t d) {
  static Stmt by_last("SELECT c_id FROM customer WHERE c_w_id=? AND c_d_id=? AND c_last=? ORDER BY c_first");
  if (Rand(1, 100) > 60) return Rand(1, kCustomers);
  std::vector<int64_t> ids;
  by_last.Bind({w, d}).BindText(LastName(static_cast<int>(Rand(0, kLastNames - 1))));
  while (by_last.Step()) ids.push_back(by_last.Int(0));
  return ids.empty() ? Rand(1, kCustomers) : ids[ids.size() / 2];
}

void NewOrder(int warehouses) {
  static Stmt w_tax("SELECT w_tax FROM warehouse WHERE w_id=?");
  static Stmt dist("SELECT d_tax, d_next_o_id FROM district WHERE d_w_id=? AND d_id=?");
  static Stmt bump("UPDATE district SET d_next_o_id=d_next_o_id+1 WHERE d_w_id=? AND d_id=?");
  static Stmt cust("SELECT c_discount FROM customer WHERE c_w_id=? AND c_d_id=? AND c_id=?");
  static Stmt order("INSERT INTO orders VALUES(?,?,?,?,?,0,?)");
  static Stmt new_order("INSERT INTO new_order VALUES(?,?,?)");
  static Stmt item("SELECT i_price FROM item WHERE i_id=?");
  static Stmt stock("SELECT s_quantity FROM stock WHERE s_w_id=? AND s_i_id=?");
  static Stmt upd_stock("UPDATE stock SET s_quantity=?, s_ytd=s_ytd+?, s_order_cnt=s_order_cnt+1 WHERE s_w_id=? AND s_i_id=?");
  static Stmt line("INSERT INTO order_line VALUES(?,?,?,?,?,?,?,?,0,?)");
  int64_t w = Rand(1, warehouses), d = Rand(1, kDistricts), c = Rand(1, kCustomers), lines = Rand(5, 15);
  bool rollback = Rand(1, 100) == 1;
  Exec("BEGIN");
  w_tax.Bind({w}).Step();
  dist.Bind({w, d}).Step();
  int64_t o = dist.Int(1);
  dist.Bind({});  // reset: release the read before writing
  bump.Bind({w, d}).Run();
  cust.Bind({w, d, c}).Step();
  order.Bind({w, d, o, c, o, lines}).Run();
  new_order.Bind({w, d, o}).Run();
  for (int64_t l = 1; l <= lines; l++) {
    int64_t i = rollback && l == lines ? kItems + 1 : Rand(1, kItems), qty = Rand(1, 10);
    if (!item.Bind({i}).Step()) {  // the unused item: TPC-C's 1 % of new-orders that roll back
      Exec("ROLLBACK");
      return;
    }
    double price = item.Double(0);
    stock.Bind({w, i}).Step();
    int64_t s_qty = stock.Int(0);
    upd_stock.Bind({s_qty >= qty + 10 ? s_qty - qty : s_qty - qty + 91, qty, w, i}).Run();
    line.Bind({w, d, o, l, i, w, qty}).BindDouble(price * static_cast<double>(qty)).BindText(Text(24)).Run();
  }
  Exec("COMMIT");
}

void Payment(int warehouses) {
  static Stmt wh("UPDATE warehouse SET w_ytd=w_ytd+? WHERE w_id=?");
  static Stmt di("UPDATE district SET d_ytd=d_ytd+? WHERE d_w_id=? AND d_id=?");
  static Stmt cu("UPDATE customer SET c_balance=c_balance-?, c_ytd_payment=c_ytd_payment+?,"
                 " c_payment_cnt=c_payment_cnt+1 WHERE c_w_id=? AND c_d_id=? AND c_id=?");
  static Stmt hi("INSERT INTO history VALUES(?,?,?,?,?,?,?,?)");
  int64_t w = Rand(1, warehouses), d = Rand(1, kDistricts);
  double amount = static_cast<double>(Rand(100, 500000)) / 100.0;
  Exec("BEGIN");
  wh.Bind({}).BindDouble(amount).BindInt(w).Run();
  di.Bind({}).BindDouble(amount).BindInt(w).BindInt(d).Run();
  int64_t c = PickCustomer(w, d);
  cu.Bind({}).BindDouble(amount).BindDouble(amount).BindInt(w).BindInt(d).BindInt(c).Run();
  hi.Bind({c, d, w, d, w, Rand(1, 1 << 30)}).BindDouble(amount).BindText(Text(24)).Run();
  Exec("COMMIT");
}

void OrderStatus(int warehouses) {
  static Stmt cu("SELECT c_balance, c_first, c_last FROM customer WHERE c_w_id=? AND c_d_id=? AND c_id=?");
  static Stmt last("SELECT o_id, o_carrier_id FROM orders WHERE o_w_id=? AND o_d_id=? AND o_c_id=? ORDER BY o_id DESC LIMIT 1");
  static Stmt lines("SELECT ol_i_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line"
                    " WHERE ol_w_id=? AND ol_d_id=? AND ol_o_id=?");
  int64_t w = Rand(1, warehouses), d = Rand(1, kDistricts);
  Exec("BEGIN");
  int64_t c = PickCustomer(w, d);
  cu.Bind({w, d, c}).Run();
  if (last.Bind({w, d, c}).Step()) {
    int64_t o = last.Int(0);
    lines.Bind({w, d, o}).Run();
  }
  last.Bind({});
  Exec("COMMIT");
}

void Delivery(int warehouses) {
  static Stmt oldest("SELECT min(no_o_id) FROM new_order WHERE no_w_id=? AND no_d_id=?");
  static Stmt del("DELETE FROM new_order WHERE no_w_id=? AND no_d_id=? AND no_o_id=?");
  static Stmt cust("SELECT o_c_id FROM orders WHERE o_w_id=? AND o_d_id=? AND o_id=?");
  static Stmt carrier("UPDATE orders SET o_carrier_id=? WHERE o_w_id=? AND o_d_id=? AND o_id=?");
  static Stmt deliver("UPDATE order_line SET ol_delivery_d=? WHERE ol_w_id=? AND ol_d_id=? AND ol_o_id=?");
  static Stmt total("SELECT sum(ol_amount) FROM order_line WHERE ol_w_id=? AND ol_d_id=? AND ol_o_id=?");
  static Stmt credit("UPDATE customer SET c_balance=c_balance+?, c_delivery_cnt=c_delivery_cnt+1"
                     " WHERE c_w_id=? AND c_d_id=? AND c_id=?");
  int64_t w = Rand(1, warehouses), car = Rand(1, 10);
  Exec("BEGIN");
  for (int64_t d = 1; d <= kDistricts; d++) {
    oldest.Bind({w, d}).Step();
    int64_t o = oldest.Int(0);  // NULL (0) when none is undelivered
    oldest.Bind({});
    if (o == 0) continue;
    del.Bind({w, d, o}).Run();
    cust.Bind({w, d, o}).Step();
    int64_t c = cust.Int(0);
    cust.Bind({});
    carrier.Bind({car, w, d, o}).Run();
    deliver.Bind({Rand(1, 1 << 30), w, d, o}).Run();
    total.Bind({w, d, o}).Step();
    double sum = total.Double(0);
    total.Bind({});
    credit.Bind({}).BindDouble(sum).BindInt(w).BindInt(d).BindInt(c).Run();
  }
  Exec("COMMIT");
}

void StockLevel(int warehouses) {
  static Stmt next("SELECT d_next_o_id FROM district WHERE d_w_id=? AND d_id=?");
  static Stmt low("SELECT count(DISTINCT s_i_id) FROM order_line, stock WHERE ol_w_id=? AND ol_d_id=?"
                  " AND ol_o_id>=? AND ol_o_id<? AND s_w_id=ol_w_id AND s_i_id=ol_i_id AND s_quantity<?");
  int64_t w = Rand(1, warehouses), d = Rand(1, kDistricts);
  Exec("BEGIN");
  next.Bind({w, d}).Step();
  int64_t o = next.Int(0);
  next.Bind({});
  low.Bind({w, d, o - 20, o, Rand(10, 20)}).Run();
  Exec("COMMIT");
}

uint64_t Ns(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 || (std::strcmp(argv[2], "wal") != 0 && std::strcmp(argv[2], "rollback") != 0)) {
    std::fprintf(stderr, "usage: mapfs-tpcc DB wal|rollback WAREHOUSES TRANSACTIONS\n");
    return 2;
  }
  int warehouses = std::atoi(argv[3]);
  long long txns = std::atoll(argv[4]);
  if (warehouses < 1 || txns < 1) return std::fprintf(stderr, "mapfs-tpcc: bad counts\n"), 2;
  std::remove(argv[1]);
  for (const char* sfx : {"-wal", "-shm", "-journal"}) std::remove((std::string(argv[1]) + sfx).c_str());
  if (sqlite3_open(argv[1], &db) != SQLITE_OK) Die(argv[1]);
  Exec(std::strcmp(argv[2], "wal") == 0 ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
  Exec("PRAGMA synchronous=FULL");
  Exec(kSchema);
  auto t0 = std::chrono::steady_clock::now();
  uint64_t rows = Load(warehouses);
  auto t1 = std::chrono::steady_clock::now();
  std::printf("load %llu %llu\n", static_cast<unsigned long long>(rows), static_cast<unsigned long long>(Ns(t0, t1)));
  const char* names[] = {"new-order", "payment", "order-status", "delivery", "stock-level"};
  void (*run[])(int) = {NewOrder, Payment, OrderStatus, Delivery, StockLevel};
  uint64_t count[5] = {}, ns[5] = {};
  auto m0 = std::chrono::steady_clock::now();
  for (long long k = 0; k < txns; k++) {
    int64_t p = Rand(1, 100);
    int t = p <= 45 ? 0 : p <= 88 ? 1 : p <= 92 ? 2 : p <= 96 ? 3 : 4;
    auto a = std::chrono::steady_clock::now();
    run[t](warehouses);
    ns[t] += Ns(a, std::chrono::steady_clock::now());
    count[t]++;
  }
  auto m1 = std::chrono::steady_clock::now();
  std::printf("mix %lld %llu\n", txns, static_cast<unsigned long long>(Ns(m0, m1)));
  for (int t = 0; t < 5; t++)
    std::printf("%s %llu %llu\n", names[t], static_cast<unsigned long long>(count[t]), static_cast<unsigned long long>(ns[t]));
  // Statements are function statics: finalized at exit; close lazily.
  if (sqlite3_close_v2(db) != SQLITE_OK) Die("close");
  return 0;
}
