// fairsched::Client: the exported face of ClientCore (client_core.hpp). Each
// method forwards; the contracts are in include/fairsched/client.hpp.
#include "fairsched/client.hpp"

#include <memory>
#include <utility>

#include "client_core.hpp"

namespace fairsched {

using client_detail::ClientCore;

Result<Client> Client::connect(ClientOptions options) {
  Result<std::unique_ptr<ClientCore>> core = ClientCore::connect(std::move(options));
  if (!core) return std::move(core).error();
  return Client(std::move(core).value());
}

Client::Client(std::unique_ptr<ClientCore> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Tenant> Client::openTenant(std::string_view name, std::optional<std::string_view> tier) {
  std::vector<Result<Tenant>> r = impl_->openTenants(std::span(&name, 1), tier);
  return std::move(r.front());
}

std::vector<Result<Tenant>> Client::openTenants(std::span<const std::string_view> names,
                                                std::optional<std::string_view> tier) {
  return impl_->openTenants(names, tier);
}

Result<void> Client::closeTenant(Tenant tenant) {
  std::vector<Result<void>> r = impl_->closeTenants(std::span(&tenant, 1));
  return std::move(r.front());
}

std::vector<Result<void>> Client::closeTenants(std::span<const Tenant> tenants) {
  return impl_->closeTenants(tenants);
}

Result<RequestId> Client::submit(const SubmitRequest& request) {
  return impl_->submit(request, nullptr);
}

Result<void> Client::cancel(RequestId id) {
  return impl_->cancel(id);
}

std::size_t Client::poll(std::vector<Completion>& out, std::size_t max) {
  return impl_->poll(out, max);
}

Result<void> Client::wait(std::chrono::nanoseconds timeout) {
  return impl_->wait(timeout);
}

int Client::completionFd() const {
  return impl_->completionFd();
}

Result<bool> Client::prepareToBlock() {
  return impl_->prepareToBlock();
}

Result<Completion> Client::submitAndWait(const SubmitRequest& request,
                                         std::chrono::nanoseconds timeout) {
  return impl_->submitAndWait(request, timeout);
}

Result<void> Client::reconnect() {
  return impl_->reconnect();
}

void Client::shutdown() {
  impl_->shutdown();
}

bool Client::connected() const {
  return impl_->connected();
}

std::vector<EndpointDescription> Client::endpoints() const {
  return impl_->endpoints();
}

std::uint64_t Client::clientId() const {
  return impl_->clientId();
}

std::size_t Client::outstanding() const {
  return impl_->outstanding();
}

ClientStats Client::stats() const {
  return impl_->stats();
}

RetryBudget& Client::retryBudget() {
  return impl_->retryBudget();
}

}  // namespace fairsched
